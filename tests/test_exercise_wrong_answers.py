"""Recognition, not only distinctness: for every exercise, wrong answers written apart from its catalogue of planted
mistakes, as students write them, must fail the check (and the master's solution must pass: test_exercises.py).

They cover the classes of mistakes that value checks on toy inputs miss: a function that changes the caller's
tensors in place, a result cut from the autograd graph, an answer right only for the shapes, batch sizes, dtypes or
masks of the fixed cases (the drawn cases and ragged batches catch them), a loop that feeds the model only the last
token, a cache that stores the wrong thing, and a function that calls the package's own answer.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter

import pytest
import torch
import torch.nn.functional as F

import workbench as wb
from workbench.lessons import exercises as ex


# -- 01 -------------------------------------------------------------------------------------------------------------
def dot_score_in_place(s, H):
    H.mul_(2.0)  # "scale, then halve": the caller's states are doubled
    return (H * s[:, None, :]).sum(-1) / 2


def dot_score_cut(s, H):
    return torch.tensor((H * s[:, None, :]).sum(-1).tolist(), dtype=H.dtype)


def dot_score_first_row(s, H):
    return H @ s[0]  # the first sentence's decoder state for the whole batch


def dot_score_float32(s, H):
    return (H.float() * s.float()[:, None, :]).sum(-1)


def dist_in_place(e, mask):
    e.masked_fill_(~mask, float("-inf"))
    return torch.softmax(e, -1)


def dist_first_mask_row(e, mask):
    return torch.softmax(e.masked_fill(~mask[0], float("-inf")), -1)


def dist_detached(e, mask):
    return torch.softmax(e.detach().masked_fill(~mask, float("-inf")), -1)


def dist_log(e, mask):
    return torch.log_softmax(e.masked_fill(~mask, float("-inf")), -1).exp().clamp(max=0.999)


def ctx_in_place(alpha, H):
    H.mul_(alpha[:, :, None])
    return H.sum(1)


def ctx_detached(alpha, H):
    return (alpha[:, :, None] * H.detach()).sum(1)


def ctx_first_weights(alpha, H):
    return (alpha[0][None, :, None] * H).sum(1)


# -- 02 -------------------------------------------------------------------------------------------------------------
def weights_uniform_empty_rows(q, k, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e9)  # a row with no key becomes uniform, not zero
    return torch.softmax(scores, -1)


def weights_4d_masks_only(q, k, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None and mask.dim() == 4:  # the causal (T, T) mask is silently ignored
        scores = scores.masked_fill(~mask, float("-inf"))
    w = torch.softmax(scores, -1)
    return w.nan_to_num(0.0)


def weights_scaled_by_keys(q, k, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(k.shape[-2])  # the number of keys, not their width
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, -1).nan_to_num(0.0)


def weights_in_place(q, k, mask=None):
    q /= math.sqrt(q.shape[-1])
    scores = q @ k.transpose(-2, -1)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, -1).nan_to_num(0.0)


def weights_calls_package(q, k, mask=None):
    return wb.attention_weights(q, k, mask)


def attention_torch_kernel(q, k, v, mask=None):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # torch's kernel: the lesson writes it by hand


def attention_additive_float_mask(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores + mask.float()  # a 0/1 mask added to the scores blocks nothing
    return torch.softmax(scores, -1) @ v


def attention_detached_values(q, k, v, mask=None):
    return weights_4d_masks_only(q, k, mask) @ v.detach() if mask is None else \
        _good_weights(q, k, mask) @ v.detach()


def _good_weights(q, k, mask):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, -1).nan_to_num(0.0)


def attention_calls_package(q, k, v, mask=None):
    return wb.scaled_dot_product_attention(q, k, v, mask=mask)[0]


# -- 03 -------------------------------------------------------------------------------------------------------------
def split_chunks_positions(x, n_heads):
    return torch.stack(x.chunk(n_heads, dim=1), dim=1)  # cuts the positions, not the features


def split_fixed_width(x, n_heads):
    B, T, D = x.shape
    return x.reshape(B, T, -1, 4).transpose(1, 2)  # d_head taken as 4


def split_in_place(x, n_heads):
    B, T, D = x.shape
    y = x.clone()
    x.unsqueeze_(1)  # the caller's tensor changes shape
    return y.view(B, T, n_heads, D // n_heads).transpose(1, 2)


def split_calls_package(x, n_heads):
    return wb.MultiHeadAttention(x.shape[-1], n_heads)._split(x)


def merge_along_positions(z):
    return torch.cat([z[:, h] for h in range(z.shape[1])], dim=1)


def merge_float32(z):
    return z.transpose(1, 2).flatten(2).float()


def merge_detached(z):
    return z.transpose(1, 2).reshape(z.shape[0], z.shape[2], -1).detach()


def _heads(t, n_heads):
    B, T, D = t.shape
    return t.view(B, T, n_heads, D // n_heads).transpose(1, 2)


def mha_2d_masks_only(x, W_q, W_k, W_v, W_o, n_heads, mask=None):
    q, k, v = (_heads(x @ W, n_heads) for W in (W_q, W_k, W_v))
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None and mask.dim() == 2:  # a (B, 1, 1, T) padding mask is ignored
        scores = scores.masked_fill(~mask, float("-inf"))
    z = torch.softmax(scores, -1) @ v
    return z.transpose(1, 2).reshape(x.shape) @ W_o


def mha_queries_as_keys(x, W_q, W_k, W_v, W_o, n_heads, mask=None):
    q, k, v = (_heads(x @ W, n_heads) for W in (W_q, W_q, W_v))
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return (torch.softmax(scores, -1) @ v).transpose(1, 2).reshape(x.shape) @ W_o


def mha_torch(x, W_q, W_k, W_v, W_o, n_heads, mask=None):
    B, T, D = x.shape
    out, _ = F.multi_head_attention_forward(
        x.transpose(0, 1), x.transpose(0, 1), x.transpose(0, 1), D, n_heads, torch.cat([W_q, W_k, W_v], 1).T, None,
        None, None, False, 0.0, W_o.T, None, training=False,
        key_padding_mask=None if mask is None else ~mask[:, 0, 0], need_weights=False)
    return out.transpose(0, 1)


def mha_detached_output_projection(x, W_q, W_k, W_v, W_o, n_heads, mask=None):
    q, k, v = (_heads(x @ W, n_heads) for W in (W_q, W_k, W_v))
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return (torch.softmax(scores, -1) @ v).transpose(1, 2).reshape(x.shape) @ W_o.detach()


# -- 04 -------------------------------------------------------------------------------------------------------------
def table_float64(max_len, d_model):
    p = torch.arange(max_len, dtype=torch.float64)[:, None]
    angle = p / 10000 ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    pe = torch.zeros(max_len, d_model, dtype=torch.float64)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(angle), torch.cos(angle[:, : d_model // 2])
    return pe  # never converted to float32


def table_even_widths_only(max_len, d_model):
    p = torch.arange(max_len, dtype=torch.float64)[:, None]
    angle = p / 10000 ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    pe = torch.zeros(max_len, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)  # fails for an odd d_model
    return pe.float()


def table_base_1000(max_len, d_model):
    p = torch.arange(max_len, dtype=torch.float64)[:, None]
    angle = p / 1000 ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    pe = torch.zeros(max_len, d_model, dtype=torch.float64)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(angle), torch.cos(angle[:, : d_model // 2])
    return pe.float()


def table_from_the_package_module(max_len, d_model):
    return wb.model.positional.SinusoidalPositionalEncoding(d_model, max_len=max_len).pe[:max_len].float()


def distance_centres_in_place(table):
    table -= table.mean(0)  # distances do not change, but the caller's table does
    return ((table[:, None] - table[None]) ** 2).sum(-1).sqrt()


def distance_float32(table):
    t = table.float()
    return ((t[:, None] - t[None]) ** 2).sum(-1).sqrt()


def distance_root_of_l1(table):
    return (table[:, None] - table[None]).abs().sum(-1).sqrt()


def distance_epsilon_under_the_root(table):
    """sqrt(d² + 1e-5) "to avoid NaN": 0.003 where the distance is 0."""
    return (((table[:, None] - table[None]) ** 2).sum(-1) + 1e-5).sqrt()


# -- 05 -------------------------------------------------------------------------------------------------------------
def padding_greater_than(tokens, pad_id):
    return tokens > pad_id


def padding_uint8(tokens, pad_id):
    return (tokens != pad_id).to(torch.uint8)


def padding_in_place(tokens, pad_id):
    tokens[tokens == pad_id] = -1
    return tokens != -1


def causal_transposed(T):
    return torch.ones(T, T).tril().bool().T


def causal_fixed_size(T):
    return torch.ones(8, 8, dtype=torch.bool).tril()[:T, :T]


def causal_strict(T):
    return torch.arange(T)[:, None] > torch.arange(T)[None, :]


def cache_keys_transposed(x_new, cache, W_q, W_k, W_v):
    k_new, v_new = (x_new @ W_k).transpose(1, 2), x_new @ W_v  # keys stored as (B, D, t)
    cache.k = k_new if cache.k is None else torch.cat([cache.k, k_new], dim=2)
    cache.v = v_new if cache.v is None else torch.cat([cache.v, v_new], dim=1)
    return torch.softmax((x_new @ W_q) @ cache.k / math.sqrt(x_new.shape[-1]), -1) @ cache.v


def cache_values_are_keys(x_new, cache, W_q, W_k, W_v):
    k_new = x_new @ W_k
    cache.k = k_new if cache.k is None else torch.cat([cache.k, k_new], dim=1)
    cache.v = cache.k
    return torch.softmax((x_new @ W_q) @ cache.k.transpose(1, 2) / math.sqrt(x_new.shape[-1]), -1) @ cache.v


def cache_detached_history(x_new, cache, W_q, W_k, W_v):
    k_new, v_new = x_new @ W_k, x_new @ W_v
    cache.k = k_new if cache.k is None else torch.cat([cache.k.detach(), k_new], dim=1)
    cache.v = v_new if cache.v is None else torch.cat([cache.v.detach(), v_new], dim=1)
    return torch.softmax((x_new @ W_q) @ cache.k.transpose(1, 2) / math.sqrt(x_new.shape[-1]), -1) @ cache.v


def cache_torch_sdpa(x_new, cache, W_q, W_k, W_v):
    k_new, v_new = x_new @ W_k, x_new @ W_v
    cache.k = k_new if cache.k is None else torch.cat([cache.k, k_new], dim=1)
    cache.v = v_new if cache.v is None else torch.cat([cache.v, v_new], dim=1)
    return F.scaled_dot_product_attention(x_new @ W_q, cache.k, cache.v)


def greedy_last_token_only(next_logits, bos_id, eos_id, max_len):
    out, last = [], bos_id
    for t in range(max_len):
        last = eos_id if t + 1 >= max_len else int(next_logits([last]).argmax())
        out.append(last)
        if last == eos_id:
            break
    return out


def greedy_without_bos(next_logits, bos_id, eos_id, max_len):
    out: list[int] = []
    for t in range(max_len):
        nxt = eos_id if t + 1 >= max_len else int(next_logits(out or [bos_id]).argmax())
        out.append(nxt)
        if nxt == eos_id:
            break
    return out


def greedy_budget_counts_bos(next_logits, bos_id, eos_id, max_len):
    prefix = [bos_id]
    while len(prefix) < max_len:
        nxt = int(next_logits(prefix).argmax())
        if len(prefix) + 1 >= max_len:
            nxt = eos_id
        prefix.append(nxt)
        if nxt == eos_id:
            break
    return prefix[1:]


# -- 06 -------------------------------------------------------------------------------------------------------------
def ln_centres_in_place(x, gamma, beta, eps=1e-5):
    x -= x.mean(-1, keepdim=True)
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * gamma + beta


def ln_torch(x, gamma, beta, eps=1e-5):
    return F.layer_norm(x, x.shape[-1:], gamma, beta, eps)


def ln_no_eps(x, gamma, beta, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    return (x - mean) / (x - mean).pow(2).mean(-1, keepdim=True).sqrt() * gamma + beta


def ln_detached_mean(x, gamma, beta, eps=1e-5):
    mean = x.mean(-1, keepdim=True).detach()
    return (x - mean) / torch.sqrt(((x - mean) ** 2).mean(-1, keepdim=True) + eps) * gamma + beta


def post_ln_normalised_input(x, sublayer, norm):
    return norm(x + sublayer(norm(x)))


def post_ln_detached_sublayer(x, sublayer, norm):
    return norm(x + sublayer(x).detach())


def post_ln_plain_layer_norm(x, sublayer, norm):
    return F.layer_norm(x + sublayer(x), x.shape[-1:])  # the norm's learned gain and bias ignored


def pre_ln_norm_after_sublayer(x, sublayer, norm):
    return x + norm(sublayer(x))


def pre_ln_in_place(x, sublayer, norm):
    x += sublayer(norm(x))
    return x


def pre_ln_float32(x, sublayer, norm):
    return (x + sublayer(norm(x))).float()


def ffn_gelu(x, W1, b1, W2, b2):
    return F.gelu(x @ W1 + b1) @ W2 + b2


def ffn_relu_on_input(x, W1, b1, W2, b2):
    x.relu_()
    return torch.relu(x @ W1 + b1) @ W2 + b2


def ffn_transposed(x, W1, b1, W2, b2):
    return torch.relu(x @ W1.T + b1) @ W2.T + b2


def ffn_package(x, W1, b1, W2, b2):
    ffn = wb.model.transformer.FeedForward(W1.shape[0], W1.shape[1]).to(x.dtype)
    with torch.no_grad():
        ffn.linear1.weight.copy_(W1.T), ffn.linear1.bias.copy_(b1), ffn.linear2.weight.copy_(W2.T)
        ffn.linear2.bias.copy_(b2)
    return ffn(x)


def emb_scaled_by_vocabulary(tokens, table):
    return table[tokens] * math.sqrt(table.shape[0])


def emb_detached(tokens, table):
    return table.detach()[tokens] * math.sqrt(table.shape[-1])


def emb_one_hot(tokens, table):
    return F.one_hot(tokens, table.shape[0]).float() @ table * math.sqrt(table.shape[-1])


def tied_not_transposed(h, table):
    return h @ table


def tied_log_probabilities(h, table):
    return torch.log_softmax(h @ table.T, -1)


def tied_detached(h, table):
    return (h @ table.T).detach()


# -- 07 -------------------------------------------------------------------------------------------------------------
def rate_warmup_power_positive(step, d_model, warmup):
    return d_model ** -0.5 * min(step ** -0.5, step * warmup ** 1.5)


def rate_linear_warmup(step, d_model, warmup):
    return d_model ** -0.5 * min(step ** -0.5, step / warmup)


def rate_package(step, d_model, warmup):
    return wb.translation.objective.rate(step, d_model, warmup)


def shift_eos_dropped_from_target(tgt):
    return tgt[:, :-1], tgt[:, 1:].masked_fill(tgt[:, 1:] == 3, 0)


def shift_eos_blanked_in_place(tgt):
    tgt_in = tgt[:, :-1]
    tgt_in[tgt_in == 3] = 0  # a view of the caller's tensor
    return tgt_in, tgt[:, 1:]


def shift_first_and_last_cut(tgt):
    return tgt[:, 1:-1], tgt[:, 2:]


def loss_graph_cut(logits, targets, pad_id, eps):
    logp = torch.log_softmax(logits.float(), -1)
    loss = (1 - eps) * -logp.gather(-1, targets[..., None]).squeeze(-1) + eps * -logp.mean(-1)
    return torch.tensor(loss[targets != pad_id].sum().item())


def loss_pad_zero(logits, targets, pad_id, eps):
    logp = torch.log_softmax(logits.float(), -1)
    loss = (1 - eps) * -logp.gather(-1, targets[..., None]).squeeze(-1) + eps * -logp.mean(-1)
    return loss[targets != 0].sum()


def loss_stabilised_in_place(logits, targets, pad_id, eps):
    logits -= logits.max(-1, keepdim=True).values  # softmax does not change, the caller's logits do
    logp = torch.log_softmax(logits.float(), -1)
    loss = (1 - eps) * -logp.gather(-1, targets[..., None]).squeeze(-1) + eps * -logp.mean(-1)
    return loss[targets != pad_id].sum()


def average_into_first(state_dicts):
    total = state_dicts[0]
    for sd in state_dicts[1:]:
        for k in total:
            total[k] += sd[k]  # overwrites the caller's first checkpoint
    return {k: v / len(state_dicts) for k, v in total.items()}


def average_cut(state_dicts):
    return {k: torch.tensor((sum(sd[k] for sd in state_dicts) / len(state_dicts)).tolist(), dtype=v.dtype)
            for k, v in state_dicts[-1].items()}


def average_float64(state_dicts):
    return {k: sum(sd[k].double() for sd in state_dicts) / len(state_dicts) for k in state_dicts[-1]}


def lp_precedence(length, alpha):
    return (5.0 + length.float()) / 6.0 ** alpha


def lp_integer_division(length, alpha):
    return ((5 + length) // 6).float() ** alpha


def lp_package(length, alpha):
    return wb.translation.decode.length_penalty(length, alpha)


def beam_unsorted(scores, logp):
    B, K, V = logp.shape
    top, idx = (scores[:, :, None] + logp).reshape(B, K * V).topk(K, dim=-1, sorted=False)
    order = torch.argsort(idx, dim=-1)  # kept in index order, not by score
    top, idx = top.gather(-1, order), idx.gather(-1, order)
    return top, idx // V, idx % V


def beam_divides_by_beam_size(scores, logp):
    B, K, V = logp.shape
    top, idx = (scores[:, :, None] + logp).reshape(B, K * V).topk(K, dim=-1)
    return top, idx // K, idx % K


def beam_in_place(scores, logp):
    B, K, V = logp.shape
    logp += scores[:, :, None]
    top, idx = logp.reshape(B, K * V).topk(K, dim=-1)
    return top, idx // V, idx % V


def beam_detached(scores, logp):
    B, K, V = logp.shape
    top, idx = (scores[:, :, None] + logp).reshape(B, K * V).topk(K, dim=-1)
    return top.detach(), idx // V, idx % V


# -- 08 -------------------------------------------------------------------------------------------------------------
def ngrams_last_dropped(hyp, ref, n):
    def grams(tokens):
        return Counter(tuple(tokens[i:i + n]) for i in range(len(tokens) - n))  # one n-gram short

    h, r = grams(hyp), grams(ref)
    return sum(min(c, r[g]) for g, c in h.items()), sum(h.values())


def ngrams_denominator_from_length(hyp, ref, n):
    h = Counter(tuple(hyp[i:i + n]) for i in range(len(hyp) - n + 1))
    r = Counter(tuple(ref[i:i + n]) for i in range(len(ref) - n + 1))
    return sum(min(c, r[g]) for g, c in h.items()), len(hyp) - n + 1  # negative for a short hypothesis


def ngrams_sacrebleu(hyp, ref, n):
    from sacrebleu.metrics.helpers import extract_word_ngrams

    h, r = extract_word_ngrams(hyp, n), extract_word_ngrams(ref, n)
    return sum(min(c, r[g]) for g, c in h.items()), sum(h.values())


def bp_no_guard(hyp_len, ref_len):
    return 1.0 if hyp_len >= ref_len else math.exp(1 - ref_len / hyp_len)


def bp_empty_clamped(hyp_len, ref_len):
    return min(1.0, math.exp(1 - ref_len / max(hyp_len, 1)))


def bp_integer_ratio(hyp_len, ref_len):
    return 1.0 if hyp_len >= ref_len else (math.exp(1 - ref_len // hyp_len) if hyp_len else 0.0)


# -- 09 -------------------------------------------------------------------------------------------------------------
def _row_entropy(w):
    return -(w * w.clamp_min(1e-12).log()).sum(-1)  # (B, H, Tq)


def entropy_in_place(weights, query_mask=None):
    weights.clamp_(min=1e-12)  # "avoid log 0": the caller's zero weights become 1e-12
    ent = -(weights * weights.log()).sum(-1)
    valid = torch.ones_like(ent, dtype=torch.bool) if query_mask is None else query_mask[:, None, :].expand_as(ent)
    return (ent * valid).sum((0, 2)) / valid.sum((0, 2))


def entropy_mean_of_sentence_means(weights, query_mask=None):
    ent = _row_entropy(weights)
    if query_mask is None:
        return ent.mean((0, 2))
    per_sentence = (ent * query_mask[:, None, :]).sum(-1) / query_mask.sum(-1)[:, None]  # (B, H)
    return per_sentence.mean(0)  # every sentence weighs the same, whatever its length


def entropy_float32(weights, query_mask=None):
    w = weights.float()
    ent = _row_entropy(w)
    valid = (w.sum(-1) > 0) & (query_mask[:, None, :] if query_mask is not None else True)
    return (ent * valid).sum((0, 2)) / valid.sum((0, 2)).clamp_min(1)


def entropy_calls_package(weights, query_mask=None):
    from workbench.inspect.heads import head_entropy

    return head_entropy(weights, query_mask)


def positional_unshifted_query_mask(weights, offset, query_mask=None):
    picked = torch.diagonal(weights, offset=offset, dim1=-2, dim2=-1)  # (B, H, n): the key i + offset of each query i
    n = picked.shape[-1]
    if query_mask is None:
        return picked.mean((0, 2)) if n else picked.sum((0, 2))
    qm = query_mask[:, None, :n].to(weights.dtype)  # the first n queries, not the n queries that have such a key
    return (picked * qm).sum((0, 2)) / qm.sum((0, 2)).clamp_min(1)


def positional_detached(weights, offset, query_mask=None):
    B, H, T, _ = weights.shape
    q = torch.arange(T)
    k = q + offset
    ok = (k >= 0) & (k < T)
    picked = weights.detach()[:, :, q[ok], k[ok]]
    valid = (weights.sum(-1) > 0)[:, :, q[ok]]
    if query_mask is not None:
        valid = valid & query_mask[:, None, q[ok]]
    return (picked * valid).sum((0, 2)) / valid.sum((0, 2)).clamp_min(1)


def positional_in_place(weights, offset, query_mask=None):
    if query_mask is not None:
        weights.mul_(query_mask[:, None, :, None])  # zero the padding queries' rows in the caller's tensor
    B, H, T, _ = weights.shape
    q = torch.arange(T)
    k = q + offset
    ok = (k >= 0) & (k < T)
    valid = weights.sum(-1)[:, :, q[ok]] > 0
    return (weights[:, :, q[ok], k[ok]] * valid).sum((0, 2)) / valid.sum((0, 2)).clamp_min(1)


def positional_calls_package(weights, offset, query_mask=None):
    return wb.inspect.heads.positional_score(weights, offset, query_mask)


# -- 10 -------------------------------------------------------------------------------------------------------------
def macs_lstm(kind, n, d, k=3, r=8):
    return {"self_attention": 2 * n * n * d, "recurrent": 8 * n * d * d, "convolutional": k * n * d * d,
            "restricted": 2 * r * n * d}[kind]  # an LSTM's four gates, not the table's plain recurrent cell


def macs_kernel_three(kind, n, d, k=3, r=8):
    return {"self_attention": 2 * n * n * d, "recurrent": 2 * n * d * d, "convolutional": 3 * n * d * d,
            "restricted": 2 * r * n * d}[kind]  # k taken as the default 3


def macs_window_eight(kind, n, d, k=3, r=8):
    return {"self_attention": 2 * n * n * d, "recurrent": 2 * n * d * d, "convolutional": k * n * d * d,
            "restricted": 16 * n * d}[kind]  # r taken as 8


def macs_calls_package(kind, n, d, k=3, r=8):
    from workbench.lessons import complexity

    return next(row["macs"] for row in complexity.table1(n, d, k, r) if row["layer"] == kind)


def path_rounded_log(kind, n, k=3, r=8, dilated=False):
    if kind == "recurrent":
        return max(n, 1)
    if n <= 1 or kind == "self_attention":
        return 1
    if kind == "convolutional":
        return max(1, round(math.log(n, k))) if dilated else -(-(n - 1) // ((k - 1) // 2))
    return -(-(n - 1) // (r // 2))


def _path_with_dilated_layers(name, layers):
    """A path_length that is right except for its dilated-convolution count, ``layers(n, k)``."""
    def path_length(kind, n, k=3, r=8, dilated=False):
        if kind == "recurrent":
            return max(n, 1)
        if n <= 1 or kind == "self_attention":
            return 1
        if kind == "convolutional":
            return layers(n, k) if dilated else -(-(n - 1) // ((k - 1) // 2))
        return -(-(n - 1) // (r // 2))

    path_length.__name__ = name  # the test's id
    return path_length


# the float-log mistake written with log10: right at the powers of 3, 5 and 10, wrong at 8**3 = 512
path_dilated_by_log10 = _path_with_dilated_layers("path_dilated_by_log10", lambda n, k: math.ceil(math.log10(n) / math.log10(k)))
# the float log rounded to 6 digits first: right at every exact power, wrong just past a large one
path_dilated_by_rounded_log = _path_with_dilated_layers("path_dilated_by_rounded_log", lambda n, k: math.ceil(round(math.log(n, k), 6)))


def hook_writes_into_output(cached, position):
    """Overwrites the module's own output: a backward that needs that output (tanh) breaks."""
    def hook(module, inputs, output):
        output[:, position] = cached[:, position]
        return output

    return hook


def hook_writes_into_output_returns_none(cached, position):
    def hook(module, inputs, output):
        output[:, position] = cached[:, position]

    return hook


def entropy_no_guard_for_empty_heads(weights, query_mask=None):
    """Divides by the number of counted rows without a floor: NaN for a head with none."""
    ent = -torch.special.xlogy(weights, weights).sum(-1)
    valid = weights.sum(-1) > 0
    if query_mask is not None:
        valid = valid & query_mask[:, None, :]
    return (ent * valid).sum((0, 2)) / valid.sum((0, 2))


def path_dilated_ignored(kind, n, k=3, r=8, dilated=False):
    if kind == "recurrent":
        return max(n, 1)
    if n <= 1 or kind == "self_attention":
        return 1
    if kind == "convolutional":
        return -(-(n - 1) // ((k - 1) // 2))
    return -(-(n - 1) // (r // 2))


def path_zero_for_one_position(kind, n, k=3, r=8, dilated=False):
    if n <= 1:
        return 0  # "nothing to cross"
    if kind == "recurrent":
        return n
    if kind == "self_attention":
        return 1
    if kind == "convolutional":
        if dilated:
            layers, reach = 0, 1
            while reach < n:
                layers, reach = layers + 1, reach * k
            return layers
        return -(-(n - 1) // ((k - 1) // 2))
    return -(-(n - 1) // (r // 2))


def path_calls_package(kind, n, k=3, r=8, dilated=False):
    from workbench.lessons.complexity import analytic_path_length

    return analytic_path_length(kind, n, k, r, dilated)


# -- 11 -------------------------------------------------------------------------------------------------------------
def verdict_margin_inclusive(delta, direction, margin):
    if direction == 0:
        return "agrees" if abs(delta) <= margin else "differs"
    if direction * delta >= margin:  # a trend exactly at the margin is not yet beyond the noise
        return "agrees"
    return "opposite" if direction * delta <= -margin else "within noise"


def verdict_strict_no_difference(delta, direction, margin):
    if direction == 0:
        return "agrees" if abs(delta) < margin else "differs"  # at the margin it still agrees
    if direction * delta > margin:
        return "agrees"
    return "opposite" if direction * delta < -margin else "within noise"


def verdict_calls_package(delta, direction, margin):
    from workbench.lessons.verdicts import judge_claims

    judged, _ = judge_claims({"b": 0.0, "y": margin, "v": delta}, {"c": ("v", direction)}, "b", "y")
    return judged["c"]["verdict"]


def pv_differences_in_place(base, variant, direction, factor=2.0):
    for i, b in enumerate(base):
        variant[i] -= b  # the caller's figures become differences
    mean = statistics.fmean(variant)
    margin = factor * statistics.stdev(variant) / math.sqrt(len(variant))
    return mean, margin, _verdict(mean, direction, margin)


def _verdict(delta, direction, margin):
    if direction == 0:
        return "agrees" if abs(delta) <= margin else "differs"
    if direction * delta > margin:
        return "agrees"
    return "opposite" if direction * delta < -margin else "within noise"


def pv_divided_by_n(base, variant, direction, factor=2.0):
    diffs = [v - b for b, v in zip(base, variant, strict=True)]
    mean = statistics.fmean(diffs)
    margin = factor * statistics.stdev(diffs) / len(diffs)  # n, not sqrt(n)
    return mean, margin, _verdict(mean, direction, margin)


def pv_three_seeds(base, variant, direction, factor=2.0):
    diffs = [v - b for b, v in zip(base, variant, strict=True)]
    mean = statistics.fmean(diffs)
    margin = factor * statistics.stdev(diffs) / math.sqrt(3)  # the lesson runs three seeds
    return mean, margin, _verdict(mean, direction, margin)


def pv_calls_package(base, variant, direction, factor=2.0):
    from workbench.lessons.table3 import judge_seeded

    runs = [{"row": r, "seed": s, "x": x} for r, xs in (("b", base), ("v", variant)) for s, x in enumerate(xs)]
    j = judge_seeded(runs, {"c": ("v", direction)}, "x", base="b", factor=factor)["c"]
    return j["delta"], j["margin"], j["verdict"]


# -- 12 -------------------------------------------------------------------------------------------------------------
def ig_in_place(f, x, baseline, n_steps):
    x.sub_(baseline)  # x now holds x - x' in the caller's tensor
    total = torch.zeros_like(x)
    for k in range(1, n_steps + 1):
        point = (baseline + k / n_steps * x).detach().requires_grad_(True)
        with torch.enable_grad():
            total += torch.autograd.grad(f(point).sum(), point)[0]
    return x * total / n_steps


def ig_twenty_steps(f, x, baseline, n_steps):
    alphas = torch.arange(1, 21, dtype=x.dtype) / 20  # n_steps ignored
    path = (baseline + alphas[:, None, None] * (x - baseline)).detach().requires_grad_(True)
    with torch.enable_grad():
        (g,) = torch.autograd.grad(f(path.reshape(-1, x.shape[-1])).sum(), path)
    return (x - baseline) * g.mean(0)


def ig_midpoint(f, x, baseline, n_steps):
    alphas = (torch.arange(n_steps, dtype=x.dtype) + 0.5) / n_steps
    path = (baseline + alphas[:, None, None] * (x - baseline)).detach().requires_grad_(True)
    with torch.enable_grad():
        (g,) = torch.autograd.grad(f(path.reshape(-1, x.shape[-1])).sum(), path)
    return (x - baseline) * g.mean(0)


def ig_zero_baseline_assumed(f, x, baseline, n_steps):
    alphas = torch.arange(1, n_steps + 1, dtype=x.dtype) / n_steps
    path = (alphas[:, None, None] * x).detach().requires_grad_(True)  # the path from 0, whatever the baseline
    with torch.enable_grad():
        (g,) = torch.autograd.grad(f(path.reshape(-1, x.shape[-1])).sum(), path)
    return x * g.mean(0)


def ig_captum(f, x, baseline, n_steps):
    from captum.attr import IntegratedGradients

    return IntegratedGradients(f).attribute(x, baselines=baseline, n_steps=max(n_steps, 2), method="riemann_right")


# -- 13 -------------------------------------------------------------------------------------------------------------
def hook_fills_cached(cached, position):
    def hook(module, inputs, output):
        keep = torch.arange(output.shape[1]) != position
        cached[:, keep] = output[:, keep]  # builds the patched activation in the caller's cache
        return cached

    return hook


def hook_detached(cached, position):
    def hook(module, inputs, output):
        out = output.detach().clone()
        out[:, position] = cached[:, position]
        return out

    return hook


def hook_first_sentence(cached, position):
    def hook(module, inputs, output):
        out = output.clone()
        out[:, position] = cached[0, position]  # the first sentence's activation for the whole batch
        return out

    return hook


def hook_counted_from_end(cached, position):
    def hook(module, inputs, output):
        out = output.clone()
        out[:, -position] = cached[:, -position]
        return out

    return hook


# -- 14 -------------------------------------------------------------------------------------------------------------
def rerank_in_place(logp, lengths, alpha):
    logp /= ((5 + lengths) / 6) ** alpha
    return logp, int(logp.argmax())


def rerank_cut(logp, lengths, alpha):
    scores = [float(s) / ((5 + int(n)) / 6) ** alpha for s, n in zip(logp, lengths, strict=True)]
    out = torch.tensor(scores, dtype=logp.dtype)
    return out, int(out.argmax())


def rerank_alpha_fixed(logp, lengths, alpha):
    out = logp / ((5 + lengths) / 6) ** 0.6  # the paper's alpha, whatever is asked
    return out, int(out.argmax())


def rerank_calls_package(logp, lengths, alpha):
    from workbench.translation.decode import length_penalty

    out = logp / length_penalty(lengths, alpha)
    return out, int(out.argmax())


def rerank_sorted_last(logp, lengths, alpha):
    out = logp / ((5 + lengths) / 6) ** alpha
    return out, sorted(range(len(out)), key=lambda i: float(out[i]))[-1]  # of tied scores, the last one


def rerank_index_as_float(logp, lengths, alpha):
    out = logp / ((5 + lengths) / 6) ** alpha
    return out, out.argmax().float()  # hyps[index] would fail: not an int


# -- 15 -------------------------------------------------------------------------------------------------------------
def merges_consumed(word, merges):
    symbols = list(word)
    while merges:
        a, b = merges.pop(0)  # the caller's list is emptied by the first word
        i = 0
        while i < len(symbols) - 1:
            if (symbols[i], symbols[i + 1]) == (a, b):
                symbols[i: i + 2] = [a + b]
            else:
                i += 1
    return symbols


def merges_marker_dropped(word, merges):
    rank = {p: r for r, p in enumerate(merges)}
    symbols = list(word.lstrip("▁")) or list(word)
    while len(symbols) > 1:
        best = min(range(len(symbols) - 1), key=lambda i: rank.get((symbols[i], symbols[i + 1]), len(rank)))
        if (symbols[best], symbols[best + 1]) not in rank:
            break
        symbols[best: best + 2] = [symbols[best] + symbols[best + 1]]
    return symbols


def merges_sorted_alphabetically(word, merges):
    order = sorted(merges)
    symbols = list(word)
    for a, b in order:
        i = 0
        while i < len(symbols) - 1:
            if (symbols[i], symbols[i + 1]) == (a, b):
                symbols[i: i + 2] = [a + b]
            else:
                i += 1
    return symbols


def merges_calls_package(word, merges):
    from workbench.lessons import bpe

    return bpe.apply_merges(word, merges)


def padding_sorts_batches(batches, *lengths):
    for b in batches:
        b.sort()  # harmless for the counts, but the caller's batches change order
    real = sum(side[i] for side in lengths for b in batches for i in b)
    slots = sum(len(b) * max(side[i] for i in b) for side in lengths for b in batches)
    return {"real": float(real), "slots": float(slots), "padding_fraction": 1 - real / slots,
            "batches": float(len(batches))}


def padding_two_sides(batches, src, tgt=None):
    real = sum(src[i] + tgt[i] for b in batches for i in b)  # a target side is assumed
    slots = sum(len(b) * (max(src[i] for i in b) + max(tgt[i] for i in b)) for b in batches)
    return {"real": float(real), "slots": float(slots), "padding_fraction": 1 - real / slots,
            "batches": float(len(batches))}


def padding_percent(batches, *lengths):
    real = sum(side[i] for side in lengths for b in batches for i in b)
    slots = sum(len(b) * max(side[i] for i in b) for side in lengths for b in batches)
    return {"real": float(real), "slots": float(slots), "padding_fraction": 100 * (1 - real / slots),
            "batches": float(len(batches))}


def padding_calls_package(batches, *lengths):
    from workbench.lessons.bpe import padding_stats

    return padding_stats(batches, *lengths)


# -- 16 -------------------------------------------------------------------------------------------------------------
def marian_float64(max_len, d_model):
    p = torch.arange(max_len, dtype=torch.float64)[:, None]
    angle = p / 10000 ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    return torch.cat([angle.sin(), angle[:, : d_model // 2].cos()], 1)


def marian_even_only(max_len, d_model):
    p = torch.arange(max_len, dtype=torch.float64)[:, None]
    angle = p / 10000 ** (torch.arange(0, d_model - 1, 2, dtype=torch.float64) / d_model)  # d_model // 2 angles
    return torch.cat([angle.sin(), angle.cos()], 1).float()


def marian_from_the_package(max_len, d_model):
    from workbench.model.positional import sinusoidal_table

    return sinusoidal_table(max_len, d_model, layout="halves")


# -- 15 -------------------------------------------------------------------------------------------------------------
def ci_sorted_index(scores, resamples, m, alpha=0.05):
    means = scores[resamples].mean(dim=1).sort(dim=0).values  # (R, L)
    R, t = means.shape[0], alpha / (2 * m)
    return scores.mean(0), means[int(t * R)], means[min(int((1 - t) * R), R - 1)]  # nearest rank, no interpolation


def ci_normal_uncorrected(scores, resamples, m, alpha=0.05):
    se = scores.std(0) / scores.shape[0] ** 0.5
    return scores.mean(0), scores.mean(0) - 1.96 * se, scores.mean(0) + 1.96 * se


def ci_clamped_in_place(scores, resamples, m, alpha=0.05):
    scores.clamp_(0, 1)  # "a restored share lies in [0, 1]": changes the caller's scores
    means = scores[resamples].mean(dim=1)
    t = alpha / (2 * m)
    low, high = torch.quantile(means, torch.tensor([t, 1 - t], dtype=means.dtype), dim=0)
    return scores.mean(0), low, high


def ci_calls_package(scores, resamples, m, alpha=0.05):
    from workbench.lessons.pronoun_pairs import resampled_interval

    mean, low, high = resampled_interval(scores.numpy(), resamples.numpy(), 1 - alpha / m)
    return tuple(torch.as_tensor(v, dtype=scores.dtype) for v in (mean, low, high))


# -- 18 -------------------------------------------------------------------------------------------------------------
def decided_stabilised_in_place(lens_logits):
    lens_logits.sub_(lens_logits.amax(-1, keepdim=True))  # a softmax habit, in the caller's tensor
    top = lens_logits.argmax(-1)  # (L, B, T)
    L = top.shape[0]
    idx = torch.arange(L).view(L, 1, 1)
    return (torch.where(top != top[-1], idx, -1).amax(0) + 1).long()


def decided_by_probability(lens_logits):
    p = lens_logits.softmax(-1).gather(-1, lens_logits[-1].argmax(-1)[None, ..., None].expand(
        lens_logits.shape[0], *lens_logits.shape[1:3], 1))[..., 0]  # (L, B, T): the final word's probability
    L = p.shape[0]
    idx = torch.arange(L).view(L, 1, 1)
    return (torch.where(p <= 0.5, idx, -1).amax(0) + 1).clamp(max=L - 1).long()  # "more likely than not"


def decided_as_float(lens_logits):
    top = lens_logits.argmax(-1)
    return (top != top[-1]).float().flip(0).cumsum(0).flip(0).gt(0).float().sum(0)  # a float count of layers


def decided_calls_package(lens_logits):
    from workbench.inspect.lens import decision_layer

    return decision_layer(lens_logits)


# -- found by an independent probe: inputs the fixed cases did not have ------------------------------------------
def padding_no_guard(batches, *lengths):
    real = sum(side[i] for side in lengths for b in batches for i in b)
    slots = sum(len(b) * max(side[i] for i in b) for side in lengths for b in batches)  # max() of an empty batch
    return {"real": float(real), "slots": float(slots), "padding_fraction": (slots - real) / slots,
            "batches": float(len(batches))}


def ngrams_joined_keys(hyp, ref, n):
    grams = lambda t: Counter("".join(t[i:i + n]) for i in range(len(t) - n + 1))  # noqa: E731  "ab"+"c" == "a"+"bc"
    h, r = grams(hyp), grams(ref)
    return sum(min(c, r[g]) for g, c in h.items()), sum(h.values())


def entropy_zero_rows_counted(weights, query_mask=None):
    ent = -(weights * weights.clamp_min(1e-12).log()).sum(-1)  # (B, H, Tq)
    valid = torch.ones_like(ent, dtype=torch.bool) if query_mask is None else query_mask[:, None, :].expand_as(ent)
    return (ent * valid).sum((0, 2)) / valid.sum((0, 2)).clamp_min(1)


def positional_zero_rows_counted(weights, offset, query_mask=None):
    B, H, T, _ = weights.shape
    q = torch.arange(T)
    q = q[(q + offset >= 0) & (q + offset < T)]
    picked = weights[:, :, q, q + offset]
    valid = torch.ones_like(picked, dtype=torch.bool)
    if query_mask is not None:
        valid = valid & query_mask[:, None, q]
    return (picked * valid).sum((0, 2)) / valid.sum((0, 2)).clamp_min(1)


def path_half_kernel_in_floats(kind, n, k=3, r=8, dilated=False):
    if kind == "recurrent":
        return max(n, 1)
    if n <= 1 or kind == "self_attention":
        return 1
    if kind == "convolutional":
        if dilated:
            layers, reach = 0, 1
            while reach < n:
                reach, layers = reach * k, layers + 1
            return layers
        return math.ceil((n - 1) / ((k - 1) / 2))  # half a position for an even k
    return -(-(n - 1) // (r // 2))


def average_first_dtype(sds):
    return {k: (sum(sd[k].double() for sd in sds) / len(sds)).to(sds[0][k].dtype) for k in sds[-1]}


def average_summed_in_own_dtype(sds):
    return {k: (sum(sd[k] for sd in sds) / len(sds)).to(sds[-1][k].dtype) for k in sds[-1]}


# -- the second outside probe's wrong answers that passed (large scores, padding not at the end, ties, cancellation,
# hidden units above 6, log of softmax, letter case, a float log just under an integer, a helper of the checks)
def _overflowing_scores(scores, allowed):
    e = torch.exp(scores) * allowed
    den = e.sum(-1, keepdim=True)
    return e / torch.where(den > 0, den, torch.ones_like(den))


def dist_no_max_taken_off(e, mask):
    return _overflowing_scores(e, mask)


def dist_padding_assumed_at_the_end(e, mask):
    out = torch.zeros_like(e)
    for b in range(e.shape[0]):
        n = int(mask[b].sum())
        out[b, :n] = torch.softmax(e[b, :n], -1)
    return out


def weights_no_max_taken_off(q, k, mask=None):
    allowed = torch.ones(1, dtype=torch.bool) if mask is None else mask
    return _overflowing_scores(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), allowed)


def weights_two_d_mask_taken_as_causal(q, k, mask=None):
    if mask is not None and mask.dim() == 2:
        mask = torch.ones_like(mask).tril().bool()
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return torch.softmax(s, -1).nan_to_num(0.0)


def weights_through_sdpa(q, k, mask=None):
    eye = torch.eye(k.shape[-2], dtype=q.dtype).expand(*k.shape[:-1], k.shape[-2])
    return F.scaled_dot_product_attention(q, k, eye, attn_mask=mask).nan_to_num(0.0)


def weights_through_the_checks_helper(q, k, mask=None):
    from workbench.lessons.exercises import nb02

    return nb02._weights(q, k, mask)


def attention_no_max_taken_off(q, k, v, mask=None):
    return weights_no_max_taken_off(q, k, mask) @ v


def mha_no_max_taken_off(x, W_q, W_k, W_v, W_o, n_heads, mask=None):
    B, T, D = x.shape
    heads = [(x @ W).view(B, T, n_heads, D // n_heads).transpose(1, 2) for W in (W_q, W_k, W_v)]
    scores = heads[0] @ heads[1].transpose(-2, -1) / math.sqrt(D // n_heads)
    w = _overflowing_scores(scores, torch.ones(1, dtype=torch.bool) if mask is None else mask)
    return (w @ heads[2]).transpose(1, 2).reshape(B, T, D) @ W_o


def padding_from_lengths(tokens, pad_id):
    lengths = (tokens != pad_id).sum(1)
    return torch.arange(tokens.shape[1])[None, :] < lengths[:, None]


def padding_from_the_first_pad_on(tokens, pad_id):
    return (tokens != pad_id).long().cumprod(1).bool()


def causal_memorised_up_to_16(T):
    return torch.ones(T, T, dtype=torch.bool).tril() if T <= 16 else torch.ones(T, T, dtype=torch.bool)


def cache_no_max_taken_off(x_new, cache, W_q, W_k, W_v):
    k, v = x_new @ W_k, x_new @ W_v
    cache.k = k if cache.k is None else torch.cat([cache.k, k], 1)
    cache.v = v if cache.v is None else torch.cat([cache.v, v], 1)
    scores = (x_new @ W_q) @ cache.k.transpose(1, 2) / math.sqrt(x_new.shape[-1])
    return _overflowing_scores(scores, torch.ones(1, dtype=torch.bool)) @ cache.v


def greedy_ties_to_the_last(next_logits, bos_id, eos_id, max_len):
    out = [bos_id]
    while True:
        if len(out) == max_len:
            out.append(eos_id)
            break
        logits = next_logits(out)
        out.append(int((logits == logits.max()).nonzero()[-1]))
        if out[-1] == eos_id:
            break
    return out[1:]


def greedy_in_half_precision(next_logits, bos_id, eos_id, max_len):
    """The argmax of a float16 softmax: a lead of 0.001 at logits near 8 is rounded away."""
    out = [bos_id]
    for t in range(max_len):
        nxt = eos_id if t + 1 == max_len else int(torch.softmax(next_logits(out).half(), -1).argmax())
        out.append(nxt)
        if nxt == eos_id:
            break
    return out[1:]


def ln_variance_by_cancellation(x, gamma, beta, eps):
    mean = x.mean(-1, keepdim=True)
    var = (x * x).mean(-1, keepdim=True) - mean * mean
    return (x - mean) / torch.sqrt(var + eps) * gamma + beta


def ffn_relu6(x, W1, b1, W2, b2):
    return F.relu6(x @ W1 + b1) @ W2 + b2


def loss_log_of_softmax(logits, targets, pad_id, eps):
    logp = torch.log(torch.softmax(logits.float(), -1))
    nll = -logp.gather(-1, targets[..., None]).squeeze(-1)
    return ((1 - eps) * nll - eps * logp.mean(-1))[targets != pad_id].sum()


def ngrams_lower_cased(hyp, ref, n):
    grams = lambda words: Counter(zip(*[[w.lower() for w in words][i:] for i in range(n)], strict=False))  # noqa: E731
    h, r = grams(hyp), grams(ref)
    return sum(min(c, r[g]) for g, c in h.items()), sum(h.values())


def path_dilated_by_float_log(kind, n, k=3, r=8, dilated=False):
    if kind == "recurrent":
        return max(n, 1)
    if n <= 1 or kind == "self_attention":
        return 1
    if kind == "convolutional":
        return int(math.log(n - 1, k)) + 1 if dilated else -(-(n - 1) // ((k - 1) // 2))
    return -(-(n - 1) // (r // 2))


WRONG = {
    "01.dot_score": [dot_score_in_place, dot_score_cut, dot_score_first_row, dot_score_float32],
    "01.attention_distribution": [dist_in_place, dist_first_mask_row, dist_detached, dist_log, dist_no_max_taken_off,
                                  dist_padding_assumed_at_the_end],
    "01.context_vector": [ctx_in_place, ctx_detached, ctx_first_weights],
    "02.attention_weights": [weights_uniform_empty_rows, weights_4d_masks_only, weights_scaled_by_keys,
                             weights_in_place, weights_calls_package, weights_no_max_taken_off,
                             weights_two_d_mask_taken_as_causal, weights_through_sdpa, weights_through_the_checks_helper],
    "02.attention": [attention_torch_kernel, attention_additive_float_mask, attention_detached_values,
                     attention_calls_package, attention_no_max_taken_off],
    "03.split_heads": [split_chunks_positions, split_fixed_width, split_in_place, split_calls_package],
    "03.merge_heads": [merge_along_positions, merge_float32, merge_detached],
    "03.multi_head_attention": [mha_2d_masks_only, mha_queries_as_keys, mha_torch, mha_detached_output_projection,
                                mha_no_max_taken_off],
    "04.sinusoidal_table": [table_float64, table_even_widths_only, table_base_1000, table_from_the_package_module],
    "04.distance_matrix": [distance_centres_in_place, distance_float32, distance_root_of_l1,
                           distance_epsilon_under_the_root],
    "05.padding_mask": [padding_greater_than, padding_uint8, padding_in_place, padding_from_lengths,
                         padding_from_the_first_pad_on],
    "05.causal_mask": [causal_transposed, causal_fixed_size, causal_strict, causal_memorised_up_to_16],
    "05.attend_with_cache": [cache_keys_transposed, cache_values_are_keys, cache_detached_history, cache_torch_sdpa,
                              cache_no_max_taken_off],
    "05.greedy_loop": [greedy_last_token_only, greedy_without_bos, greedy_budget_counts_bos, greedy_ties_to_the_last,
                       greedy_in_half_precision],
    "06.layer_norm": [ln_centres_in_place, ln_torch, ln_no_eps, ln_detached_mean, ln_variance_by_cancellation],
    "06.post_ln": [post_ln_normalised_input, post_ln_detached_sublayer, post_ln_plain_layer_norm],
    "06.pre_ln": [pre_ln_norm_after_sublayer, pre_ln_in_place, pre_ln_float32],
    "06.feed_forward": [ffn_gelu, ffn_relu_on_input, ffn_transposed, ffn_package, ffn_relu6],
    "06.scaled_embedding": [emb_scaled_by_vocabulary, emb_detached, emb_one_hot],
    "06.tied_logits": [tied_not_transposed, tied_log_probabilities, tied_detached],
    "07.rate": [rate_warmup_power_positive, rate_linear_warmup, rate_package],
    "07.shift_target": [shift_eos_dropped_from_target, shift_eos_blanked_in_place, shift_first_and_last_cut],
    "07.label_smoothed_loss": [loss_graph_cut, loss_pad_zero, loss_stabilised_in_place, loss_log_of_softmax],
    "07.average_checkpoints": [average_first_dtype, average_summed_in_own_dtype, average_into_first, average_cut, average_float64],
    "07.length_penalty": [lp_precedence, lp_integer_division, lp_package],
    "07.beam_step": [beam_unsorted, beam_divides_by_beam_size, beam_in_place, beam_detached],
    "09.ngram_matches": [ngrams_joined_keys, ngrams_last_dropped, ngrams_denominator_from_length, ngrams_sacrebleu,
                          ngrams_lower_cased],
    "09.brevity_penalty": [bp_no_guard, bp_empty_clamped, bp_integer_ratio],
    "10.head_entropy": [entropy_zero_rows_counted, entropy_in_place, entropy_mean_of_sentence_means, entropy_float32, entropy_calls_package,
                        entropy_no_guard_for_empty_heads],
    "10.positional_score": [positional_zero_rows_counted, positional_unshifted_query_mask, positional_detached, positional_in_place,
                            positional_calls_package],
    "11.layer_macs": [macs_lstm, macs_kernel_three, macs_window_eight, macs_calls_package],
    "11.path_length": [path_half_kernel_in_floats, path_rounded_log, path_dilated_ignored, path_zero_for_one_position, path_calls_package,
                        path_dilated_by_float_log, path_dilated_by_log10, path_dilated_by_rounded_log],
    "12.verdict": [verdict_margin_inclusive, verdict_strict_no_difference, verdict_calls_package],
    "12.paired_verdict": [pv_differences_in_place, pv_divided_by_n, pv_three_seeds, pv_calls_package],
    "13.integrated_gradients": [ig_in_place, ig_twenty_steps, ig_midpoint, ig_zero_baseline_assumed, ig_captum],
    "14.patch_hook": [hook_fills_cached, hook_detached, hook_first_sentence, hook_counted_from_end, hook_writes_into_output,
                      hook_writes_into_output_returns_none],
    "16.rerank_finished": [rerank_in_place, rerank_cut, rerank_alpha_fixed, rerank_calls_package, rerank_sorted_last,
                           rerank_index_as_float],
    "08.apply_merges": [merges_consumed, merges_marker_dropped, merges_sorted_alphabetically, merges_calls_package],
    "08.padding_stats": [padding_no_guard, padding_sorts_batches, padding_two_sides, padding_percent, padding_calls_package],
    "17.marian_positions": [marian_float64, marian_even_only, marian_from_the_package],
    "15.corrected_interval": [ci_sorted_index, ci_normal_uncorrected, ci_clamped_in_place, ci_calls_package],
    "18.decision_layer": [decided_stabilised_in_place, decided_by_probability, decided_as_float, decided_calls_package],
}


# -- the third outside probe's wrong answers that passed (a fill that is not -inf, float64 computed in float32 and
# cast back, a tensor or numpy number where a Python int or float is asked, probabilities that underflow, ties,
# floating logarithms with a fudge term, the verdict judged on the standard deviation, requires_grad set on the
# caller's tensor)
def _softmax_then_renormalise(e, mask):
    w = torch.softmax(e, -1) * mask
    return w / w.sum(-1, keepdim=True)  # 0/0 when a padded score dominates the row


def _padding_filled_with_minus_30(e, mask):
    return torch.softmax(e.masked_fill(~mask, -30.0), -1)


def _weights_filled_with_minus_100(q, k, mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, -100.0)
    w = torch.softmax(s, -1)
    return w.masked_fill(~mask.any(-1, keepdim=True), 0.0) if mask is not None else w


def _mha_filled_with_minus_100(x, W_q, W_k, W_v, W_o, n_heads, mask=None):
    B, T, D = x.shape
    q, k, v = ((x @ W).view(B, T, n_heads, D // n_heads).transpose(1, 2) for W in (W_q, W_k, W_v))
    s = q @ k.transpose(-2, -1) / math.sqrt(D // n_heads)
    if mask is not None:
        s = s.masked_fill(~mask, -100.0)
    return (torch.softmax(s, -1) @ v).transpose(1, 2).reshape(B, T, D) @ W_o


def _distance_with_epsilon(table):
    d = table[:, None, :] - table[None, :, :]
    return ((d ** 2).sum(-1) + 1e-12).sqrt()


def _distance_in_float32(table):
    return torch.cdist(table.float(), table.float()).to(table.dtype)


def _cache_step_in_float32(x_new, cache, W_q, W_k, W_v):
    k_new, v_new = x_new @ W_k, x_new @ W_v
    cache.k = k_new if cache.k is None else torch.cat([cache.k, k_new], 1)
    cache.v = v_new if cache.v is None else torch.cat([cache.v, v_new], 1)
    q, K, V = (x_new @ W_q).float(), cache.k.float(), cache.v.float()
    return (torch.softmax(q @ K.transpose(1, 2) / math.sqrt(x_new.shape[-1]), -1) @ V).to(x_new.dtype)


def _greedy_keeps_tensors(next_logits, bos_id, eos_id, max_len):
    prefix = [bos_id]
    for t in range(max_len):
        nxt = next_logits(prefix).argmax() if t + 1 < max_len else torch.tensor(eos_id)
        prefix.append(nxt)  # a 0-d tensor, not an int
        if nxt == eos_id:
            break
    return prefix[1:]


def _greedy_tensor_prefix(next_logits, bos_id, eos_id, max_len):
    prefix = torch.tensor([bos_id])
    for t in range(max_len):
        nxt = eos_id if t + 1 >= max_len else int(next_logits(prefix).argmax())
        prefix = torch.cat([prefix, torch.tensor([nxt])])
        if nxt == eos_id:
            break
    return prefix[1:].tolist()


def _layer_norm_in_float32(x, gamma, beta, eps=1e-5):
    xf = x.float()
    m, v = xf.mean(-1, keepdim=True), xf.var(-1, keepdim=True, unbiased=False)
    return ((xf - m) / torch.sqrt(v + eps) * gamma.float() + beta.float()).to(x.dtype)


def _rate_as_tensor(step, d_model, warmup):
    s = torch.tensor(float(step))
    return d_model ** -0.5 * torch.minimum(s ** -0.5, s * warmup ** -1.5)


def _shift_as_list(tgt):
    return [tgt[:, :-1], tgt[:, 1:]]


def _average_summed_in_float32(state_dicts):
    return {k: (sum(sd[k].float() for sd in state_dicts) / len(state_dicts)).to(state_dicts[-1][k].dtype)
            for k in state_dicts[-1]}


def _beam_by_probabilities(scores, logp):
    B, K, V = logp.shape
    p = (scores[..., None].exp() * logp.exp()).reshape(B, -1)  # exp(-120) underflows
    top, idx = p.topk(K)
    return top.log(), idx // V, idx % V


def _ngrams_as_tensors(hyp, ref, n):
    grams = lambda t: Counter(tuple(t[i:i + n]) for i in range(len(t) - n + 1))  # noqa: E731
    h, r = grams(hyp), grams(ref)
    return torch.tensor(sum(min(c, r[g]) for g, c in h.items())), torch.tensor(sum(h.values()))


def _brevity_as_tensor(hyp_len, ref_len):
    if hyp_len >= ref_len:
        return torch.tensor(1.0)
    return torch.tensor(0.0) if hyp_len == 0 else torch.exp(torch.tensor(1 - ref_len / hyp_len))


def _path_log_minus_epsilon(kind, n, k=3, r=8, dilated=False):
    if kind == "recurrent":
        return max(n, 1)
    if n <= 1 or kind == "self_attention":
        return 1
    if kind == "convolutional" and dilated:
        return math.ceil(math.log(n, k) - 1e-9)  # a fudge term for the float log: wrong at 2**31 + 1
    return -(-(n - 1) // ((k - 1) // 2 if kind == "convolutional" else r // 2))


def _verdict_on_the_deviation(base, variant, direction, factor=2.0):
    d = [v - b for b, v in zip(base, variant, strict=True)]
    mean, sd = statistics.fmean(d), statistics.stdev(d)
    t, m = direction * mean, factor * sd  # the margin it reports is the standard error's, the verdict not
    verdict = ("agrees" if abs(mean) <= m else "differs") if direction == 0 else (
        "agrees" if t > m else "opposite" if t < -m else "within noise")
    return mean, factor * sd / math.sqrt(len(d)), verdict


def _ig_marks_the_callers_input(f, x, baseline, n_steps):
    x.requires_grad_(True)
    xd, total = x.detach(), torch.zeros_like(x.detach())
    for step in range(1, n_steps + 1):
        p = (baseline + step / n_steps * (xd - baseline)).detach().requires_grad_(True)
        (g,) = torch.autograd.grad(f(p).sum(), p)
        total = total + g
    return (xd - baseline) * total / n_steps


def _rerank_by_topk(logp, lengths, alpha):
    s = logp / ((5.0 + lengths.to(logp.dtype)) / 6.0) ** alpha
    return s, int(s.topk(1).indices[0])  # topk does not keep the first of tied scores


def _rerank_numpy_index(logp, lengths, alpha):
    import numpy as np

    s = logp / ((5.0 + lengths.to(logp.dtype)) / 6.0) ** alpha
    return s, np.argmax(s.detach().numpy())


PROBE3 = {
    "01.attention_distribution": [_softmax_then_renormalise, _padding_filled_with_minus_30],
    "02.attention_weights": [_weights_filled_with_minus_100],
    "03.multi_head_attention": [_mha_filled_with_minus_100],
    "04.distance_matrix": [_distance_with_epsilon, _distance_in_float32],
    "05.attend_with_cache": [_cache_step_in_float32],
    "05.greedy_loop": [_greedy_keeps_tensors, _greedy_tensor_prefix],
    "06.layer_norm": [_layer_norm_in_float32],
    "07.rate": [_rate_as_tensor],
    "07.shift_target": [_shift_as_list],
    "07.average_checkpoints": [_average_summed_in_float32],
    "07.beam_step": [_beam_by_probabilities],
    "09.ngram_matches": [_ngrams_as_tensors],
    "09.brevity_penalty": [_brevity_as_tensor],
    "11.path_length": [_path_log_minus_epsilon],
    "12.paired_verdict": [_verdict_on_the_deviation],
    "13.integrated_gradients": [_ig_marks_the_callers_input],
    "16.rerank_finished": [_rerank_by_topk, _rerank_numpy_index],
}

for _eid, _fns in PROBE3.items():
    WRONG[_eid] = [*WRONG[_eid], *_fns]

CASES = [(eid, fn) for eid, fns in WRONG.items() for fn in fns]


def test_every_exercise_has_at_least_three_independent_wrong_answers():
    assert set(WRONG) == set(ex.EXERCISES), set(ex.EXERCISES) ^ set(WRONG)
    assert all(len(fns) >= 3 for fns in WRONG.values())
    planted = {m.fn for e in ex.EXERCISES.values() for m in e.mistakes}
    assert not planted & {fn for _, fn in CASES}  # written apart from the catalogues


@pytest.mark.parametrize(("exercise_id", "wrong"), CASES, ids=[f"{e}:{f.__name__}" for e, f in CASES])
def test_an_independent_wrong_answer_fails_with_one_line_naming_what(exercise_id, wrong):
    result = ex.check(exercise_id, wrong)
    assert result.status == ex.FAILED, f"{wrong.__name__} passed: {result!r}"
    assert result.function is ex.get(exercise_id).reference
    assert "\n" not in result.message and len(result.message) < 700
