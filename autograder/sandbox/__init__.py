"""The sandbox: the one boundary between the trusted grader and student code.

The grading process never imports student code. Student code runs only in a student process
(student_process.py, started by path as `python -I student_process.py CONFIG`, or forked by a warm zygote of
forkserver.py), which confines itself before it imports torch or any student file, and answers requests in
wire.py's format (plain tensors and containers, no pickle). The trusted side (client.py) sends the requests,
bounds what each answer may cost, kills a child that hangs, restarts one that dies, and gives up on a module
that crashes it twice. A child that cannot start (before its handshake no student code has run) is the
grader's failure (errors.GraderUnavailable), never the student's 0.

By job: limits.py (what a student process is given: resource limits, writable space, the folders it never sees,
the environments' allow-lists), isolation.py (the levels, probed once per process; choose_isolation), errors.py,
client.py (Sandbox, messages), process.py (the process under it), remote.py (RemoteModule); the student side:
student_process.py, an orchestrator over the siblings it loads by path before it confines itself (keep them in
this folder): a file per subsystem (channel.py, libc.py, namespaces.py, devices.py, privileges.py, keeper.py,
rlimits.py, landlock.py, landlock_rules.py, seccomp.py, student_code.py, request_server.py) and the helpers
shared with the trusted side (wire.py, lazy_dynamo.py, seeding.py, standin.py); and what confines or measures a
process tree from outside: diskguard.py, freeze.py, batchlock.py, forkserver.py (generic warm fork servers) and
forkclient.py (their owner's side). (The students' public checks, which run in their own process as shipped,
are autograder/selfcheck.py: not a part of the boundary.)

Nothing is re-exported here: import a name from the module that defines it (so that a test's monkeypatch
hits the module that reads it).
"""
