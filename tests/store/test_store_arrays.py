"""Token ids and logprobs as compact binary: what goes in comes out; what is not a token id is refused."""

from __future__ import annotations

import numpy as np
import pytest

from agentr1.store.arrays import decode_floats, decode_ids, encode_floats, encode_ids


def test_ids_round_trip_from_lists_and_arrays():
    ids = [0, 7, 49_151, 2**31 - 1]
    assert decode_ids(encode_ids(ids)) == ids
    assert decode_ids(encode_ids(np.array(ids, dtype=np.int64))) == ids
    assert encode_ids(ids) == np.array(ids, dtype="<i4").tobytes()
    assert decode_ids(encode_ids([])) == [] and encode_ids(None) is None
    assert decode_floats(encode_floats([-0.5, 0.0])) == [-0.5, 0.0]


@pytest.mark.parametrize("bad", [[-1], [2**31], [1.5], ["3"], [2**70], [True, False], np.array([0.5])])
def test_what_is_not_a_token_id_is_refused(bad):
    with pytest.raises(ValueError, match="non-negative integers"):
        encode_ids(bad)
