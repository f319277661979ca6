"""The estimator's inputs in the caller's words: matched by name, never a data value.

``X_server`` is matched to ``X``'s columns by name (or refused naming the difference),
client ids may be names (numbered as a data file's), a scikit-learn scaler in a Pipeline
before the estimator is refused instead of clustering two spaces, and no error quotes
a value of the data (a text column of secret strings).
"""

from __future__ import annotations

import traceback
import warnings

import numpy as np
import pandas as pd
import pytest
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from fedkmeans import FedDPKMeans
from fedkmeans.config import ConfigError

MEANS = np.array([[-4.0, 1.0, 20.0], [3.0, 3.0, 0.0], [1.0, -4.0, 10.0]])
COLUMNS = ["a", "b", "c"]
SECRET = "s3cr3t-Paris-42"


def _frames(seed: int = 0, n: int = 1500, clients: int = 15):
    rng = np.random.default_rng(seed)
    x = MEANS[rng.integers(0, 3, n)] + rng.normal(0.0, 0.5, (n, 3))
    q = MEANS[rng.integers(0, 3, 60)] + rng.normal(0.0, 0.5, (60, 3))
    return (pd.DataFrame(x, columns=COLUMNS), rng.integers(0, clients, n),
            pd.DataFrame(q, columns=COLUMNS))


def _fit(X, groups, X_server, **kw):
    return FedDPKMeans(n_clusters=3, random_state=3, reproducible_noise=True, **kw).fit(
        X, groups=groups, X_server=X_server)


def test_x_server_with_permuted_columns_gives_the_centers_of_x_server_in_order():
    X, ids, Q = _frames()
    in_order = _fit(X, ids, Q)
    permuted = _fit(X, ids, Q[["c", "a", "b"]])
    assert permuted.cluster_centers_.tobytes() == in_order.cluster_centers_.tobytes()
    assert list(permuted.feature_names_in_) == COLUMNS
    # and not the centers of the columns taken by position (the silent 1.75 x of issue 50)
    by_position = _fit(X, ids, Q[["c", "a", "b"]].to_numpy())
    assert by_position.cluster_centers_.tobytes() != in_order.cluster_centers_.tobytes()


def test_x_server_with_other_columns_is_one_line_naming_them():
    X, ids, Q = _frames(n=300)
    with pytest.raises(ValueError, match=r"^FedDPKMeans.fit: X_server must have X's columns "
                                         r"\(matched by name\): it lacks X's column\(s\) 'c'; "
                                         r"has column\(s\) 'z' that X has not$"):
        _fit(X, ids, Q.rename(columns={"c": "z"}))


def test_a_scaler_before_the_estimator_in_a_pipeline_is_refused_not_silently_wrong():
    X, ids, Q = _frames(n=300)
    pipe = make_pipeline(StandardScaler(), FedDPKMeans(n_clusters=3))
    with pytest.raises(ValueError, match="X_server has column names but X has none.*"
                                         "Pipeline step .*preprocessing="):
        pipe.fit(X, feddpkmeans__groups=ids, feddpkmeans__X_server=Q)


def test_preprocessing_standardize_is_the_server_data_s_transform_and_is_undone():
    X, ids, Q = _frames()
    est = _fit(X, ids, Q, preprocessing="standardize")
    record = est.release_["preprocessing"]
    assert record["shift"] == pytest.approx(Q.to_numpy().mean(axis=0).tolist(), rel=1e-12)
    assert record["scale"] == pytest.approx(Q.to_numpy().std(axis=0).tolist(), rel=1e-12)
    gaps = np.sqrt(((MEANS[:, None] - est.cluster_centers_[None]) ** 2).sum(-1)).min(axis=1)
    assert (gaps < 0.5).all(), gaps  # the centers are back in the data's own space
    assert "preprocessing" not in _fit(X, ids, Q, preprocessing="none").release_
    with pytest.raises(ConfigError, match="^preprocessing must be one of 'center', "
                                          "'standardize', 'none'"):
        _fit(X, ids, Q, preprocessing="minmax")


def test_string_client_ids_are_numbered_as_the_experiment_numbers_a_file_s():
    X, ids, Q = _frames(seed=1)
    names = np.array([f"client-{i:02d}" for i in ids])  # sorted order = numeric order
    as_ints = _fit(X, ids, Q)
    as_names = _fit(X, pd.Series(names), Q)
    assert as_names.cluster_centers_.tobytes() == as_ints.cluster_centers_.tobytes()
    assert as_names.ledger_ == as_ints.ledger_


def _errors(exc_info) -> str:
    """The error and everything a traceback would print with it (chained errors too)."""
    return "".join(traceback.format_exception(exc_info.value))


@pytest.mark.parametrize("case", ["frame X", "frame X_server", "array X", "1-D X",
                                  "object groups with NaN"])
def test_no_error_message_contains_a_data_value(case):
    X, ids, Q = _frames(n=300)
    groups = ids
    if case == "frame X":
        X = X.assign(city=SECRET)
    elif case == "frame X_server":
        Q = Q.astype(object)
        Q.iloc[4, 1] = SECRET
    elif case == "array X":
        X = X.to_numpy().astype(object)
        X[7, 2] = SECRET
        Q = Q.to_numpy()
    elif case == "1-D X":
        X = np.array([SECRET, "x"] * 5)
    else:
        groups = np.array([SECRET] * 299 + [None], dtype=object)
    with pytest.raises(ValueError) as err:
        FedDPKMeans(n_clusters=3).fit(X, groups=groups, X_server=Q)
    assert SECRET not in _errors(err)
    assert str(err.value).startswith("FedDPKMeans.fit: ")
    where = {"frame X": "X column 'city' is not numeric", "frame X_server":
             "X_server column 'b' is not numeric", "array X": "X column 2 is not numeric",
             "1-D X": "X holds a value that is not a number", "object groups with NaN":
             "groups has 1 empty cell"}[case]
    assert where in str(err.value)


def test_the_readme_example_with_frames_prints_no_warning(tmp_path):
    X, ids, Q = _frames()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a feature-names warning would fail the fit
        est = FedDPKMeans(n_clusters=3).fit(X, groups=pd.Series(ids), X_server=Q)
        est.predict(X.iloc[:5])
    assert est.labels_.shape == (len(X),)


def test_privacy_spent_is_inf_when_not_private_and_n_iter_is_t():
    X, ids, Q = _frames(n=600)
    est = FedDPKMeans(n_clusters=3, epsilon=float("inf")).fit(X, groups=ids, X_server=Q)
    assert est.privacy_spent_.epsilon == float("inf") and est.ledger_ == []
    est = _fit(X, ids, Q, lloyds_steps=2)
    assert est.n_iter_ == 2
    assert any(r["stage"].startswith("lloyds-2/") for r in est.ledger_)
    assert not any(r["stage"].startswith("lloyds-3/") for r in est.ledger_)
