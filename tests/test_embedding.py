import math

import pytest
import torch

from posenc.embedding import OutputHead, TokenEmbedding, check_ids, count_parameters, neighbours, one_hot_lookup


def test_lookup_equals_one_hot_matmul_exactly(gen):
    vocab, dim = int(torch.randint(5, 300, (1,), generator=gen)), int(torch.randint(1, 65, (1,), generator=gen))
    emb = TokenEmbedding(vocab_size=vocab, dim=dim, scale=False)
    ids = torch.randint(0, vocab, (3, 11), generator=gen)
    looked_up = emb(ids)
    assert torch.equal(looked_up, one_hot_lookup(ids, emb.weight))  # bitwise, not approximately
    assert torch.equal(looked_up, emb.weight[ids])


def test_scaling_multiplies_every_norm_by_sqrt_d_and_keeps_direction(gen):
    dim = int(torch.randint(2, 129, (1,), generator=gen))
    plain = TokenEmbedding(vocab_size=50, dim=dim, scale=False)
    scaled = TokenEmbedding(vocab_size=50, dim=dim, scale=True)
    scaled.weight.data.copy_(plain.weight.data)
    ids = torch.arange(50)[None]
    a, b = plain(ids).double(), scaled(ids).double()
    torch.testing.assert_close(b.norm(dim=-1) / a.norm(dim=-1), torch.full((1, 50), math.sqrt(dim), dtype=torch.float64))
    torch.testing.assert_close(torch.cosine_similarity(a, b, dim=-1), torch.ones(1, 50, dtype=torch.float64))


def test_same_id_same_vector_anywhere():
    emb = TokenEmbedding(vocab_size=20, dim=8)
    ids = torch.tensor([[3, 7, 3, 1, 3]])
    out = emb(ids)[0]
    assert torch.equal(out[0], out[2]) and torch.equal(out[0], out[4])


def test_tied_and_untied_parameter_counts(gen):
    vocab, dim = int(torch.randint(10, 500, (1,), generator=gen)), int(torch.randint(4, 64, (1,), generator=gen))
    emb = TokenEmbedding(vocab_size=vocab, dim=dim)
    tied = OutputHead(dim=dim, vocab_size=vocab, tied_to=emb)
    untied = OutputHead(dim=dim, vocab_size=vocab)
    assert count_parameters(emb, tied) == vocab * dim
    assert count_parameters(emb, untied) == 2 * vocab * dim
    assert tied.weight is emb.weight
    h = torch.randn(2, 5, dim, generator=gen)
    torch.testing.assert_close(tied(h), torch.einsum("btd,vd->btv", h, emb.weight))


def test_doubling_vocab_doubles_table():
    assert count_parameters(TokenEmbedding(vocab_size=200, dim=16)) == 2 * count_parameters(TokenEmbedding(vocab_size=100, dim=16))


def test_stretched_row_keeps_cosine_neighbours_but_jumps_to_front_by_dot(gen):
    table = torch.randn(40, 16, generator=gen, dtype=torch.float64)
    stretched_row = 7
    before = {i: neighbours(table, i, k=5, metric="cosine")[0].tolist() for i in range(40) if i != stretched_row}
    stretched = table.clone()
    stretched[stretched_row] *= 100.0
    after = {i: neighbours(stretched, i, k=5, metric="cosine")[0].tolist() for i in before}
    assert before == after
    # by dot product it tops row i's list exactly when 100·(t_i·t_s) beats every other t_i·t_j
    fronts = 0
    for i in before:
        others = [float(table[i] @ table[j]) for j in range(40) if j not in (i, stretched_row)]
        expected = 100.0 * float(table[i] @ table[stretched_row]) > max(others)
        assert (neighbours(stretched, i, k=1, metric="dot")[0].item() == stretched_row) == expected
        fronts += expected
    assert fronts > 10  # ... which, stretched 100×, is most rows it points towards


@pytest.mark.parametrize("bad", [torch.tensor([[0, 10]]), torch.tensor([[-1, 0]])])
def test_ids_outside_vocab_raise_naming_the_id(bad):
    emb = TokenEmbedding(vocab_size=10, dim=4)
    with pytest.raises(ValueError, match=r"token id (10|-1) is outside the vocabulary \[0, 10\)"):
        emb(bad)


def test_float_ids_raise():
    with pytest.raises(TypeError, match="integer dtype"):
        check_ids(torch.tensor([1.0, 2.0]), 10)


def test_neighbour_errors():
    with pytest.raises(ValueError, match="metric"):
        neighbours(torch.randn(5, 3), 0, metric="l2")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="outside"):
        neighbours(torch.randn(5, 3), 9)
