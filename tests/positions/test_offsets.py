"""The Toeplitz layout every offset-only bias is read through (``toeplitz_rows``)."""

import pytest
import torch

from poslab.positions.offsets import toeplitz_rows


@pytest.mark.parametrize(
    "length_q, length_k, rows, keys",
    [
        (7, 7, (0, 7), (0, 7)),  # the whole square
        (7, 7, (2, 5), (0, 5)),  # a block of rows against the keys up to its last row
        (7, 7, (6, 7), (0, 7)),  # one row
        (5, 9, (0, 5), (3, 9)),  # more keys than queries, a later span of keys
        (9, 4, (1, 8), (0, 4)),  # more queries than keys
    ],
)
def test_toeplitz_rows_reads_each_entry_from_its_offset_and_is_contiguous(length_q, length_k, rows, keys):
    """Entry (i, j) is ``values[h, j − i + Lq − 1]`` (the offset k − q), written out entry by entry here; the
    result is a new contiguous tensor (the attention kernels take it as their mask without another copy)."""
    torch.manual_seed(0)
    values = torch.randn(3, length_q + length_k - 1)
    got = toeplitz_rows(values, length_q, slice(*rows), slice(*keys))
    want = torch.tensor(
        [[[values[h, j - i + length_q - 1].item() for j in range(*keys)] for i in range(*rows)] for h in range(3)]
    )
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert got.is_contiguous()
    assert got.untyped_storage().data_ptr() != values.untyped_storage().data_ptr()
