"""LoRA (Hu et al., 2021): a wrapped model starts equal to the dense one; merged weights equal the adapted model."""

from __future__ import annotations

import copy

import pytest
import torch

from posenc.models.lora import LoRALinear, apply_lora, lora_parameters, merge_lora

from .conftest import tiny_model

TARGETS = ("q_proj", "v_proj", "down_proj")


def _randomise_b(model: torch.nn.Module) -> None:
    with torch.no_grad():
        for name, p in lora_parameters(model).items():
            if name.endswith("lora_b"):
                p.normal_(0, 0.2)


def test_a_fresh_adapter_changes_nothing(seed):
    dense = tiny_model(seed)
    ids = torch.randint(0, 256, (2, 12))
    want = dense(ids)
    wrapped = copy.deepcopy(dense)
    names = apply_lora(wrapped, targets=TARGETS, rank=4, alpha=8)
    assert len(names) == 3 * 2 and all(isinstance(wrapped.get_submodule(n), LoRALinear) for n in names)
    torch.testing.assert_close(wrapped(ids), want, rtol=0, atol=0)


def test_merged_weights_equal_the_adapted_model_and_an_independent_dense_one(seed):
    dense = tiny_model(seed)
    adapted = copy.deepcopy(dense)
    apply_lora(adapted, targets=TARGETS, rank=4, alpha=8)
    _randomise_b(adapted)
    ids = torch.randint(0, 256, (2, 12))
    out = adapted(ids)
    assert (out - dense(ids)).abs().max() > 1e-3  # the update does something
    # the reference: W + (alpha / r) · B A written into the untouched dense model by hand
    reference = copy.deepcopy(dense)
    state = reference.state_dict()
    for name, module in adapted.named_modules():
        if isinstance(module, LoRALinear):
            state[f"{name}.weight"] = state[f"{name}.weight"] + (8 / 4) * module.lora_b.detach() @ module.lora_a.detach()
    reference.load_state_dict(state)
    torch.testing.assert_close(out, reference(ids), rtol=1e-5, atol=1e-5)
    merged = merge_lora(copy.deepcopy(adapted))
    assert not any(isinstance(m, LoRALinear) for m in merged.modules())
    assert set(merged.state_dict()) == set(dense.state_dict())
    torch.testing.assert_close(merged(ids), reference(ids), rtol=1e-5, atol=1e-5)


def test_only_the_adapters_train(seed):
    model = tiny_model(seed)
    apply_lora(model, targets=("q_proj",), rank=2, alpha=2, train=("norm",))
    trainable = sorted(n for n, p in model.named_parameters() if p.requires_grad)
    assert all(n.endswith(("lora_a", "lora_b")) or "norm" in n for n in trainable)
    assert {n for n in trainable if "lora" in n} == {f"layers.{i}.attn.q_proj.lora_{x}" for i in (0, 1) for x in "ab"}


def test_an_unknown_target_is_refused_with_the_names_there_are(seed):
    with pytest.raises(ValueError, match=r"\['qkv'\] match no linear layer.*'q_proj'"):
        apply_lora(tiny_model(seed), targets=("qkv",))


@pytest.mark.slow
def test_equal_to_peft_lora_with_the_same_factors(seed):
    """HF peft's own LoRA layer (when peft is installed) computes what posenc's does from the same A and B."""
    peft = pytest.importorskip("peft")
    dense = tiny_model(seed)
    ours = copy.deepcopy(dense)
    apply_lora(ours, targets=TARGETS, rank=4, alpha=8)
    _randomise_b(ours)
    theirs = peft.inject_adapter_in_model(peft.LoraConfig(r=4, lora_alpha=8, target_modules=list(TARGETS)),
                                          copy.deepcopy(dense))
    with torch.no_grad():
        for name, module in ours.named_modules():
            if isinstance(module, LoRALinear):
                layer = theirs.get_submodule(name)
                layer.lora_A["default"].weight.copy_(module.lora_a)
                layer.lora_B["default"].weight.copy_(module.lora_b)
    ids = torch.randint(0, 256, (2, 12))
    torch.testing.assert_close(ours(ids), theirs(ids), rtol=1e-5, atol=1e-5)
