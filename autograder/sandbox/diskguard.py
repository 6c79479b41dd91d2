"""A cap on what student code writes to disk where no size-capped filesystem can hold it.

At the namespaces level a student process writes only to tmpfs mounts with a
size and an inode cap (autograder/sandbox/namespaces.py). At the landlock and none levels
there is no mount namespace: its writable folders (its copy of the submission
and its home) are folders on the host's disk, and the output limit
(RLIMIT_FSIZE) bounds each file, not how many there are.

This guard is a thread of the trusted process. Every POLL seconds it asks the
filesystem how much space and how many inodes are free (`statvfs`, a few
microseconds); only when either has dropped by more than what the student may
still write, or risen (someone freed space, which would hide what the student
wrote meanwhile), does it count the writable folders (a bounded walk that
follows no link). When they hold more than the cap, it calls `exceeded`, which ends
the student's process tree. So the disk holds the cap plus what the tree
writes between two looks (POLL seconds apart, more on a busy machine), and
the grader reads nothing the student could make large: at most
`max_files` + 1 entries per walk.
"""
from __future__ import annotations

import os
import stat
import threading

POLL = 0.05  # seconds between two looks at the filesystem


def usage(folders, max_files):
    """(bytes, entries, complete) of `folders`: the disk blocks of everything under them (files, folders,
    links, never followed) and how many entries, counted up to max_files + 1; `complete` is False when a
    folder could not be read (its content is unknown)."""
    used, entries, complete = 0, 0, True
    stack = [os.fsencode(f) for f in folders]
    while stack:
        folder = stack.pop()
        try:
            with os.scandir(folder) as it:
                for entry in it:
                    entries += 1
                    if entries > max_files:
                        return used, entries, complete
                    try:
                        info = entry.stat(follow_symlinks=False)
                    except OSError:
                        complete = False
                        continue
                    used += info.st_blocks * 512
                    if stat.S_ISDIR(info.st_mode):
                        stack.append(entry.path)
        except OSError:
            complete = False
    return used, entries, complete


class DiskGuard:
    """Watches `folders` (on one filesystem) while a student process runs; calls `exceeded(why)` once, from
    its own thread, when they hold more than `max_bytes` or `max_files` entries."""

    def __init__(self, folders, max_bytes, max_files, exceeded, poll=POLL):
        self.folders = [os.fspath(f) for f in folders]
        self.max_bytes, self.max_files = max_bytes, max_files
        self.exceeded = exceeded
        self.poll = poll
        self.why = None  # what was found, once the cap was exceeded
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mha-disk-guard", daemon=True)

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def _free(self):
        st = os.statvfs(self.folders[0])
        return st.f_bavail * st.f_frsize, st.f_favail

    def _over(self):
        """What the folders hold now, and None when it is within the caps."""
        used, entries, complete = usage(self.folders, self.max_files)
        if entries > self.max_files:
            return f"more than {self.max_files} files and folders"
        if used > self.max_bytes:
            return f"{used / (1 << 20):.0f} MiB"
        return None if complete else "folders it made unreadable, while the disk filled"

    def _run(self):
        try:
            used, entries, _ = usage(self.folders, self.max_files)
            base = self._free()
            room = (self.max_bytes - used, self.max_files - entries)  # what may still be written
            while not self._stop.wait(self.poll):
                free = self._free()
                if (free[0] <= base[0] and free[1] <= base[1]
                        and base[0] - free[0] <= room[0] and base[1] - free[1] <= room[1]):
                    continue  # nothing freed, and no more taken than the student may still write
                # Counted when more was taken than the student may write, and when anyone freed space: a drop
                # measured from a base that others' deletions raised would hide what the student wrote.
                why = self._over()
                if why is not None and not self._stop.is_set():
                    self.why = why
                    self.exceeded(why)
                    return
                used, entries, _ = usage(self.folders, self.max_files)  # others wrote or freed: from here
                base, room = free, (self.max_bytes - used, self.max_files - entries)
        except OSError:
            return  # the folders are gone: the sandbox is being cleaned up
