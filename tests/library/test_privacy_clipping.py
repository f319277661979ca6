import math

import numpy as np
import pytest

from fedkmeans.privacy.clipping import (
    clip_l1,
    clip_l1_nonnegative,
    clip_l2,
    clip_rows_l2,
    clip_stacked,
)


def test_rows_hand_computed():
    x = np.array([[3.0, 4.0], [0.3, 0.4], [0.0, 0.0], [-6.0, 8.0]])
    out = clip_rows_l2(x, 1.0)
    np.testing.assert_allclose(out, [[0.6, 0.8], [0.3, 0.4], [0.0, 0.0], [-0.6, 0.8]])
    # rows already inside are bit-exact
    assert out[1].tobytes() == x[1].tobytes()
    assert np.all(np.linalg.norm(out, axis=1) <= 1.0)


def test_rows_norm_never_exceeds_bound():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(5000, 7)) * 100
    for bound in (1.0, 0.1, 3.3, 11.0):
        out = clip_rows_l2(x, bound)
        assert np.all(np.linalg.norm(out, axis=1) <= bound)
        assert np.all(np.sqrt(np.sum(out * out, axis=1)) <= bound)


def test_inputs_not_mutated_and_copy_returned():
    x = np.array([[3.0, 4.0], [0.1, 0.1]])
    before = x.copy()
    for out in (
        clip_rows_l2(x, 1.0),
        clip_l2(x, 1.0),
        clip_l1(x, 1.0),
        clip_l1_nonnegative(-x, 1.0),
        clip_stacked(x, 1.0, "l2"),
        clip_rows_l2(x, math.inf),
    ):
        assert not np.shares_memory(out, x)
    np.testing.assert_array_equal(x, before)


def test_inf_bound_is_identity_copy():
    x = np.array([[300.0, -4.0], [1e6, 2.0]])
    for fn in (clip_rows_l2, clip_l2, clip_l1):
        out = fn(x, math.inf)
        np.testing.assert_array_equal(out, x)
        assert out is not x


def test_whole_array_l2_frobenius():
    x = np.array([[3.0, 0.0], [0.0, 4.0]])  # Frobenius norm 5
    np.testing.assert_allclose(clip_l2(x, 2.5), x / 2)
    np.testing.assert_array_equal(clip_l2(x, 5.0), x)


def test_l1_hand_computed():
    x = np.array([1.0, -3.0, 4.0])  # l1 = 8
    np.testing.assert_allclose(clip_l1(x, 2.0), [0.25, -0.75, 1.0])
    np.testing.assert_array_equal(clip_l1(x, 8.0), x)


def test_l1_nonnegative():
    x = np.array([2.0, -5.0, 6.0])  # after zeroing: [2, 0, 6], l1 = 8
    np.testing.assert_allclose(clip_l1_nonnegative(x, 4.0), [1.0, 0.0, 3.0])
    np.testing.assert_allclose(clip_l1_nonnegative(x, 10.0), [2.0, 0.0, 6.0])


def test_integer_input_becomes_float():
    out = clip_rows_l2(np.array([[3, 4]]), 1.0)
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, [[0.6, 0.8]])


@pytest.mark.parametrize(
    "norm,single", [("l2", clip_l2), ("l1", clip_l1), ("l1_nonnegative", clip_l1_nonnegative)]
)
def test_stacked_matches_per_slice_loop(norm, single):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(50, 3, 4)) * rng.uniform(0.01, 5, size=(50, 1, 1))
    out = clip_stacked(x, 2.0, norm)
    expected = np.stack([single(x[i], 2.0) for i in range(x.shape[0])])
    np.testing.assert_allclose(out, expected, rtol=1e-15, atol=0)
    assert out.shape == x.shape


def test_stacked_slices_are_independent():
    x = np.array([[[3.0, 4.0]], [[0.3, 0.4]]])
    out = clip_stacked(x, 1.0, "l2")
    np.testing.assert_allclose(out, [[[0.6, 0.8]], [[0.3, 0.4]]])


@pytest.mark.parametrize("bound", [0.0, -1.0, math.nan, "a"])
def test_bad_bound(bound):
    with pytest.raises(ValueError, match="bound"):
        clip_rows_l2(np.ones((2, 2)), bound)


def test_bad_arguments():
    with pytest.raises(ValueError, match="norm"):
        clip_stacked(np.ones((2, 2)), 1.0, "linf")
    with pytest.raises(ValueError, match="x must be 2-dimensional"):
        clip_rows_l2(np.ones(3), 1.0)
    with pytest.raises(ValueError, match="finite"):
        clip_l2(np.array([1.0, np.nan]), 1.0)


def test_clip_factors_hand_computed_and_only_read():
    from fedkmeans.privacy.clipping import clip_factors

    x = np.array([[3.0, 4.0], [0.3, 0.4], [0.0, 0.0], [-6.0, 8.0]])
    x.flags.writeable = False  # a read-only view of a reply is enough
    factor = clip_factors(x, 1.0)
    np.testing.assert_allclose(factor, [0.2, 1.0, 1.0, 0.1])
    assert factor[1] == 1.0 and factor[2] == 1.0  # rows inside keep a factor of exactly 1
    np.testing.assert_allclose(clip_factors(x, 1.0, "l1"), [1 / 7, 1.0, 1.0, 1 / 14])
    np.testing.assert_array_equal(clip_factors(x, math.inf), np.ones(4))


def test_clip_factors_keep_every_product_inside_the_ball():
    from fedkmeans.privacy.clipping import clip_factors

    rng = np.random.default_rng(3)
    x = rng.normal(size=(4000, 9)) * rng.lognormal(size=(4000, 1)) * 50
    for bound in (1.0, 0.1, 3.3, 11.0):
        factor = clip_factors(x, bound)
        products = x * factor[:, None]
        assert np.all(np.sqrt(np.sum(products * products, axis=1)) <= bound)
        np.testing.assert_allclose(factor, np.minimum(1.0, bound / np.linalg.norm(x, axis=1)),
                                   rtol=1e-14)


def test_rows_in_place_are_the_bits_of_the_copy():
    x = np.random.default_rng(4).normal(size=(200, 7)) * np.logspace(-3, 3, 200)[:, None]
    copied = clip_rows_l2(x, 2.5)
    own = x.copy()
    out = clip_rows_l2(own, 2.5, copy=False)
    assert out is own
    np.testing.assert_array_equal(out, copied)
    with pytest.raises(ValueError, match="float64"):
        clip_rows_l2(np.ones((2, 2), dtype=np.float32), 1.0, copy=False)
