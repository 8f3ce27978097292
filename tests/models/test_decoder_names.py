"""The universal decoder is named for what it is; its Llama-era names are deprecated aliases for one release."""

from __future__ import annotations

import pytest

from posenc.models.decoder import Decoder, DecoderConfig, build_decoder


@pytest.mark.parametrize("old, new", [("LlamaConfig", DecoderConfig), ("LlamaLM", Decoder),
                                      ("build_llama", build_decoder)])
def test_old_names_are_the_same_objects_with_a_deprecation_warning(old, new):
    import posenc.models as models
    import posenc.models.llama as llama

    for module in (llama, models):
        with pytest.warns(DeprecationWarning, match=f"{old} is deprecated: use posenc.models.decoder"):
            assert getattr(module, old) is new  # an alias, not a second class


def test_the_old_module_still_serves_its_other_names_and_refuses_unknown_ones():
    import posenc.models.llama as llama
    from posenc.models.decoder import SwiGLU

    assert llama.SwiGLU is SwiGLU
    with pytest.raises(AttributeError, match="has no attribute 'Nothing'"):
        llama.Nothing  # noqa: B018


def test_a_decoder_config_of_any_family_is_a_decoder_config():
    from posenc.families import config_from_hf

    cfg = config_from_hf({"model_type": "gpt2", "n_embd": 16, "n_head": 2, "n_layer": 1, "vocab_size": 20,
                          "n_positions": 8})
    assert isinstance(cfg, DecoderConfig) and isinstance(build_decoder(cfg), Decoder)
