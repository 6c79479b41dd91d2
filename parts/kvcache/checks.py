"""The KV-cache part's public checks, written once: the self-check (selfcheck.py) and the notebook's check cells
run these functions, with the self-check's helpers in scope (`check`, `near`, `shape`, `holds`, `hinted`,
`Failed`, `show`: autograder/selfcheck.py); the release writes each into the check cell of 06_kvcache.ipynb that its
`cell=` names, and the constants above the checks into the notebook's check-helpers cell. Each names what it checks,
what was expected and the notebook's hint; the hidden graders (test_kvcache.py) check much more (random inputs, a
cache made by the grader, operator counts, speed).
"""

# The six tokens of 《多头注意力：堆叠与权重分割》 ("Your journey starts with one step"), with a fourth feature 0 so that
# d_in is even (the sinusoidal encoding), as one batch (1, 6, 4).
TOKENS = [[0.43, 0.15, 0.89, 0.0], [0.55, 0.87, 0.66, 0.0], [0.57, 0.85, 0.64, 0.0],
          [0.22, 0.58, 0.33, 0.0], [0.77, 0.25, 0.10, 0.0], [0.05, 0.80, 0.55, 0.0]]
#: torch.manual_seed(123); KVCacheAttention(4, 4, 6, 0.0, 2) decoding TOKENS from an empty cache: the output rows
#: (the full causal pass's, MultiHeadAttention.forward(x + PE[:6]), default nn.Linear init, Wq, Wk, Wv, Wo in order)
WORKED = [[-0.0921, -0.0366, -0.5821, -0.3076], [-0.1220, -0.0523, -0.6792, -0.3368],
          [-0.1375, -0.0604, -0.6747, -0.3678], [-0.1366, -0.0558, -0.5364, -0.3629],
          [-0.1334, -0.0532, -0.4355, -0.3547], [-0.1125, -0.0499, -0.4269, -0.3382]]


@check("kvcache", "worked example: KVCacheAttention(4, 4, 6, 0.0, 2) after torch.manual_seed(123) decodes the six "
       "tokens of 《多头注意力：堆叠与权重分割》 one at a time into the full causal pass's rows", "KVCacheAttention",
       cell="check-worked-example")
def _():
    import torch
    from kvcache import KVCacheAttention

    torch.manual_seed(123)
    module = KVCacheAttention(4, 4, 6, 0.0, 2).eval()
    x = torch.tensor([TOKENS])  # (1, 6, 4)
    with torch.no_grad():
        out, keys, values = module(x)
    shape(out, (1, 6, 4), "the output of forward(x (1, 6, 4)) from an empty cache")
    near(out[0], WORKED, "the six output rows, decoded one token at a time",
         "row t is the full causal pass's row t: step t adds pe[t] (its true position), projects the one token, "
         "appends its key and value to the cache, then scores its one query row against every cached key, with "
         "no mask. Row 0 right and the rest wrong: is the cache grown (torch.cat on dim 2)? Every row wrong: "
         "is the new token scored against its own key too, at position t, not pe[:1]?")
    show(out[0])


@check("kvcache", "the cache: keys and values (1, 2, t, 2) grow by one entry a step; decoding 3 tokens and then 3 more "
       "with their cache gives the same rows as decoding all 6", "KVCacheAttention", cell="check-cache")
def _():
    import torch
    from kvcache import KVCacheAttention

    torch.manual_seed(123)
    module = KVCacheAttention(4, 4, 6, 0.0, 2).eval()
    x = torch.tensor([TOKENS])  # (1, 6, 4)
    with torch.no_grad():
        first, keys, values = module(x[:, :3])
        shape(keys, (1, 2, 3, 2), "the keys after 3 tokens (B, H, t, head_dim)",
              "each step appends the new token's key on dim 2: torch.cat((keys, k), dim=2)")
        shape(values, (1, 2, 3, 2), "the values after 3 tokens (B, H, t, head_dim)")
        out, one_more_k, one_more_v = module.step(x[:, 3:4], keys, values)
        shape(out, (1, 1, 4), "the output of step(x (1, 1, 4), a cache of 3 tokens)")
        shape(one_more_k, (1, 2, 4, 2), "the keys after one more step")
        near(one_more_k[:, :, :3], keys.tolist(), "the first 3 keys after that step (the cache as it was given)",
             "append the new key after the cached ones, and leave those as they are")
        rest, _, _ = module(x[:, 3:], keys, values)
    near(torch.cat((first, rest), dim=1)[0], WORKED, "the rows of 3 tokens, then 3 more decoded with their cache",
         "forward(x, keys, values) continues the cache: the token after t cached ones is at position t "
         "(t = keys.shape[2]), so it adds pe[t], not pe[0]")


@check("kvcache", "one step per token: forward on 6 tokens calls step 6 times, each on one token (1, 1, 4)",
       "KVCacheAttention", cell="check-one-step-per-token")
def _():
    import torch
    from kvcache import KVCacheAttention

    torch.manual_seed(123)
    module = KVCacheAttention(4, 4, 6, 0.0, 2).eval()
    seen = []
    step = module.step

    def counted(x, keys, values):
        seen.append((tuple(x.shape), keys.shape[2]))
        return step(x, keys, values)

    module.step = counted
    with torch.no_grad():
        module(torch.tensor([TOKENS]))
    holds(seen == [((1, 1, 4), t) for t in range(6)],
          f"forward(x (1, 6, 4)) should call step once per token, each on (1, 1, 4) with a cache of t tokens (t = "
          f"0..5); it called step with (x shape, cache length) {seen}",
          "forward loops over the tokens: out, keys, values = self.step(x[:, i:i + 1], keys, values), then "
          "concatenates the outputs on dim 1; one pass over all the tokens at once is the full causal pass again")
