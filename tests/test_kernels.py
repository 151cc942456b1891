"""The cheaper CPU forms of dropout and of the projected label-smoothed loss do the same mathematics as torch.nn's."""

import pytest
import torch
import torch.nn.functional as F
from conftest import projected_loss_case
from torch import nn

import workbench as wb
from workbench.translation import kernels
from workbench.translation.batching import Batch
from workbench.translation.objective import label_smoothed_loss, step_loss


def test_dropout_drops_p_of_the_elements_and_is_unbiased():
    torch.manual_seed(0)
    x = torch.ones(2_000_003)  # not a multiple of the four lanes per draw
    y = kernels.cpu_dropout(x, 0.1)
    dropped = (y == 0).float().mean().item()
    # binomial standard error at n = 2e6: 0.0002; 5 of them
    assert abs(dropped - kernels.quantized_p(0.1)) < 1e-3
    assert abs(y.mean().item() - 1.0) < 2e-3  # kept values scaled by 1 / (1 - p): the mean is kept
    values = torch.unique(y).tolist()
    assert len(values) == 2 and values[0] == 0.0
    assert values[1] == pytest.approx(1 / (1 - kernels.quantized_p(0.1)))


def test_dropout_lanes_are_independent_and_uniform():
    """Each of the four 15-bit lanes of a draw drops at rate p, and a lane's drops do not predict its neighbour's."""
    torch.manual_seed(1)
    y = kernels.cpu_dropout(torch.ones(400_000), 0.5).view(-1, 4) == 0  # (draws, lanes)
    rates = y.float().mean(0)
    assert torch.all((rates - 0.5).abs() < 0.01), rates
    both = (y[:, 0] & y[:, 1]).float().mean().item()
    assert abs(both - 0.25) < 0.01


def test_dropout_gradient_is_the_mask_times_the_scale():
    torch.manual_seed(2)
    x = torch.randn(64, 20, 256, requires_grad=True)
    y = kernels.cpu_dropout(x, 0.1)
    g = torch.randn_like(y)
    y.backward(g)
    kept = y != 0
    scale = 1 / (1 - kernels.quantized_p(0.1))
    torch.testing.assert_close(x.grad, g * kept * scale)
    torch.testing.assert_close(y[kept], x.detach()[kept] * scale)


def test_dropout_module_is_an_nn_dropout_and_the_identity_in_eval():
    drop = kernels.Dropout(0.1)
    assert isinstance(drop, nn.Dropout)
    x = torch.randn(8, 5)
    assert torch.equal(drop.eval()(x), x)
    assert torch.equal(kernels.Dropout(0.0).train()(x), x)
    assert torch.equal(kernels.cpu_dropout(x, 1.0), torch.zeros_like(x))


def test_dropout_follows_the_global_seed():
    x = torch.ones(1000)
    torch.manual_seed(3)
    a = kernels.cpu_dropout(x, 0.3)
    torch.manual_seed(3)
    b = kernels.cpu_dropout(x, 0.3)
    assert torch.equal(a, b)
    assert not torch.equal(a, kernels.cpu_dropout(x, 0.3))


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_label_smoothed_cross_entropy_matches_torch(eps):
    torch.manual_seed(4)
    z = (torch.randn(300, 1000) * 3).requires_grad_()
    y = torch.randint(0, 1000, (300,))
    ours = kernels.label_smoothed_cross_entropy(z, y, eps)
    (g1,) = torch.autograd.grad(ours * 0.7, z)
    ref = F.cross_entropy(z, y, label_smoothing=eps, reduction="sum")
    (g2,) = torch.autograd.grad(ref * 0.7, z)
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-3)
    torch.testing.assert_close(g1, g2, rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("n_rows", [1, 130, 700])  # below, at and across the chunk size (131 rows of 8000)
def test_projected_loss_matches_projection_then_cross_entropy(n_rows):
    hidden, weight, y, ref, g2 = projected_loss_case(n_rows)
    ours = kernels.projected_label_smoothed_cross_entropy(hidden, weight, y, 0.1)
    g1 = torch.autograd.grad(ours / n_rows, (hidden, weight))
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-3)
    for a, b in zip(g1, g2, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-7)


def test_training_loss_and_gradients_equal_the_unfused_loss_on_every_position():
    """step_loss (gathered rows, fused projection and loss) == label_smoothed_loss over the full logits."""
    torch.manual_seed(6)
    model = wb.build_model(wb.preset("tiny"), 50, 50).eval()  # eval: no dropout, so both passes see one network
    src = torch.randint(4, 50, (6, 9))
    tgt = torch.randint(4, 50, (6, 10))
    src[:2, -3:] = 0
    tgt[3:, -4:] = 0
    batch = Batch(src, tgt[:, :-1], tgt[:, 1:], pad_id=0)
    loss, n = step_loss(model, model, batch, pad_id=0, eps=0.1)
    grads = torch.autograd.grad(loss / n, list(model.parameters()))
    ref, n_ref = label_smoothed_loss(model(batch.src, batch.tgt_in), batch.tgt_out, pad_id=0, eps=0.1)
    ref_grads = torch.autograd.grad(ref / n_ref, list(model.parameters()))
    assert n == n_ref == int((batch.tgt_out != 0).sum())
    torch.testing.assert_close(loss, ref, rtol=1e-5, atol=1e-4)
    for a, b in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_use_kernels_swaps_modules_not_classes_and_leaves_the_weights_and_eval_outputs_alone():
    """``wb.use_kernels`` (the one call a loop over ``wb.build_model`` needs) puts the cheap dropout where every
    ``nn.Dropout`` was and the chosen attention kernel in every block; the state dict and fp32 eval outputs are
    unchanged, and ``dropout="torch"`` puts torch's dropout back."""
    torch.manual_seed(3)
    model = wb.build_model(wb.preset("tiny", dropout=0.1), 40, 40)
    plain = [(n, m.p) for n, m in model.named_modules() if type(m) is nn.Dropout]
    state = {k: v.clone() for k, v in model.state_dict().items()}
    src, tgt = torch.randint(4, 40, (3, 7)), torch.randint(4, 40, (3, 6))
    before = model.eval()(src, tgt)
    choice = kernels.Kernels(attention=kernels.CpuAttention(bf16_step_attention="explicit"))
    assert wb.use_kernels(model, choice) is model
    swapped = [(n, m.p) for n, m in model.named_modules() if type(m) is kernels.Dropout]
    assert plain and swapped == plain  # same places, same p
    assert not any(type(m) is nn.Dropout for m in model.modules())
    blocks = [m for m in model.modules() if isinstance(m, wb.MultiHeadAttention)]
    assert blocks and all(b.fused is choice.attention for b in blocks)
    assert model.state_dict().keys() == state.keys()
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())
    assert torch.equal(model(src, tgt), before)
    kernels.use_kernels(model, kernels.Kernels(dropout="torch", attention=None))
    assert [(n, m.p) for n, m in model.named_modules() if type(m) is nn.Dropout] == plain
    assert all(b.fused is None for b in blocks)
    with pytest.raises(ValueError, match="dropout='fast'"):
        kernels.Kernels(dropout="fast")


def test_the_model_holds_no_processor_tuning():
    """``workbench/model/`` is the paper plus hook points: no processor probe (``/proc/cpuinfo``, AMX), no import of
    the runtime that reads it, and no module-level switch (a lower-case or upper-case name bound at module level to
    a bool, None or str that code then reads as a setting). Kernel choices are made by the caller and passed in."""
    import ast
    from pathlib import Path

    root = Path(wb.__file__).parent / "model"
    found = []
    for path in sorted(root.glob("*.py")):
        text = path.read_text()
        for word in ("cpuinfo", "amx", "cpu_flags", "workbench.runtime"):
            if word in text.lower():
                found.append(f"{path.name}: mentions {word}")
        for node in ast.parse(text).body:
            value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
            if isinstance(value, ast.Constant) and (value.value is None or isinstance(value.value, (bool, str))):
                found.append(f"{path.name}:{node.lineno}: module-level switch")
    assert found == [], found
