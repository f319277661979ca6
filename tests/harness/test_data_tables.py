"""Your own data as CSV, Parquet or .npz (fedkmeans.data.tables), split into clients."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fedkmeans.config import ConfigError
from fedkmeans.data.npz import save_npz
from fedkmeans.data.tables import DataFileError, TableSettings, load_file
from fedkmeans.experiment import run

ROWS, CLIENTS, K = 600, 20, 3
#: A small run: 3 well-separated clusters in 2-D, 2 nodes, a budget that finds them.
RUN = ["dataset=npz", f"k={K}", "privacy.epsilon=4", "privacy.data-radius=8",
       "federation.num-nodes=2"]


def _split(partitioner: str) -> list[str]:
    """The partitioner and, for iid/dirichlet, its number of clients (natural-id has its own)."""
    return [f"partitioner={partitioner}"] + (
        [] if partitioner == "natural-id" else ["data.num-clients=8"])


def _frame(seed: int = 1, rows: int = ROWS) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    centers = np.array([[-4.0, 0.0], [4.0, 0.0], [0.0, 4.0]])
    label = rng.integers(0, K, rows)
    xy = centers[label] + rng.normal(0, 0.5, size=(rows, 2))
    return pd.DataFrame({"client": rng.integers(0, CLIENTS, rows), "f1": xy[:, 0],
                         "f2": xy[:, 1], "label": label})


def _server(seed: int = 2) -> pd.DataFrame:
    return _frame(seed, rows=60).drop(columns="client")


def _write(frame: pd.DataFrame, path: Path) -> Path:
    if path.suffix == ".csv":
        frame.to_csv(path, index=False)
    elif path.suffix == ".parquet":
        frame.to_parquet(path, index=False)
    else:
        raise AssertionError(path)
    return path


def _files(tmp_path: Path, fmt: str, with_client: bool) -> tuple[Path, list[str]]:
    """The data file in ``fmt`` and the overrides that name its server data."""
    frame, server = _frame(), _server()
    if not with_client:
        frame = frame.drop(columns="client")
    if fmt == "npz":
        arrays = {"x": frame[["f1", "f2"]].to_numpy(), "y": frame["label"].to_numpy(),
                  "server_x": server[["f1", "f2"]].to_numpy(),
                  "server_y": server["label"].to_numpy()}
        if with_client:
            arrays["client"] = frame["client"].to_numpy()
        path = tmp_path / "data.npz"
        with path.open("wb") as fh:  # save_npz insists on a client key
            np.savez(fh, **arrays)
        return path, []
    path = _write(frame, tmp_path / f"data.{fmt}")
    _write(server, tmp_path / f"server.{fmt}")
    return path, [f"data.server-path=server.{fmt}", "data.label-column=label"]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


CASES = [(True, "natural-id"), (True, "iid"), (True, "dirichlet"), (False, "iid"),
         (False, "dirichlet")]


@pytest.mark.parametrize("fmt", ["csv", "parquet", "npz"])
@pytest.mark.parametrize("with_client, partitioner", CASES,
                         ids=[f"{'client' if c else 'noclient'}-{p}" for c, p in CASES])
def test_a_data_file_runs_end_to_end(tmp_path, fmt, with_client, partitioner):
    path, server = _files(tmp_path, fmt, with_client)
    before = {p: _digest(p) for p in tmp_path.iterdir()}
    result = run([*RUN, f"data.path={path}", *server, *_split(partitioner),
                  f"output-dir={tmp_path / 'out'}"])
    assert {p: _digest(p) for p in before} == before  # the user's files are only read
    assert result["config"]["data.partitioner"] == partitioner
    assert result["metrics"]["num_points"] == ROWS  # the server's rows are their own
    clients = CLIENTS if partitioner == "natural-id" else 8
    assert result["federation"]["num_clients"] == clients
    assert result["metrics"]["accuracy"] is not None  # the labels were read, not features
    assert np.array(result["centers"]).shape == (K, 2)
    assert result["metrics"]["cost_ratio"] < 1.5
    # release.json: this run's settings only, the file by its name (issue 50)
    published = json.loads(Path(result["artefacts"]["release"]).read_text())["config"]
    assert published["data.path"] == path.name and str(tmp_path) not in json.dumps(published)
    mixture = {"data.dim", "data.components", "data.points-per-client", "data.variance",
               "data.partition", "data.server-points-per-component",
               "data.server-uniform-points", "data.holdout", "data.server-points"}
    assert not mixture & set(published)
    assert ("data.num-clients" in published) == (partitioner != "natural-id")


def test_a_server_fraction_runs_and_its_rows_leave_the_clients(tmp_path):
    path = _write(_frame(), tmp_path / "data.csv")
    result = run([*RUN, f"data.path={path}", "data.server-fraction=0.1",
                  f"output-dir={tmp_path / 'out'}"])
    assert result["metrics"]["num_points"] == ROWS - 60
    assert result["metrics"]["accuracy"] is None  # no label column named: no labels


@pytest.mark.slow
def test_the_cli_reads_a_relative_csv_path(tmp_path):
    import subprocess
    import sys

    _write(_frame(), tmp_path / "data.csv")
    proc = subprocess.run(
        [sys.executable, "-m", "fedkmeans.experiment", *RUN, "data.path=data.csv",
         "data.server-fraction=0.1", *_split("iid")],
        cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(Path(proc.stdout.strip().splitlines()[-1]).read_text())
    assert result["federation"]["num_clients"] == 8


# ---- the split ------------------------------------------------------------------------

def _settings(**kw) -> TableSettings:
    return TableSettings(**{"label_column": "label", "server_fraction": 0.1, **kw})


def test_natural_id_is_flower_datasets_natural_id_partitioner(tmp_path):
    from datasets import Dataset
    from flwr_datasets.partitioner import NaturalIdPartitioner

    frame = _frame()
    frame["client"] = np.array(["zoe", "al", "bo", "cy", "di"])[frame["client"] % 5]
    path = _write(frame, tmp_path / "d.csv")
    data = load_file(path, _settings(server_fraction=0.0, server_path="d.csv"))
    ours = {int(c): np.sort(np.flatnonzero(data.client == c)) for c in data.client_ids()}
    flower = NaturalIdPartitioner(partition_by="client")
    flower.dataset = Dataset.from_pandas(frame.assign(row=np.arange(len(frame))))
    theirs = {i: np.sort(flower.load_partition(i)["row"]) for i in range(flower.num_partitions)}
    assert ours.keys() == theirs.keys() == set(range(5))
    for i in ours:
        np.testing.assert_array_equal(ours[i], theirs[i])


def test_integer_client_ids_are_kept(tmp_path):
    frame = _frame()
    frame["client"] = frame["client"] * 10 + 7
    data = load_file(_write(frame, tmp_path / "d.csv"), _settings())
    assert set(data.client_ids()) <= set(range(7, 10 * CLIENTS, 10))


def test_iid_shards_are_equal_seeded_and_cover_every_row(tmp_path):
    path = _write(_frame().drop(columns="client"), tmp_path / "d.parquet")
    a = load_file(path, _settings(partitioner="iid", num_clients=7, seed=3))
    again = load_file(path, _settings(partitioner="iid", num_clients=7, seed=3))
    other = load_file(path, _settings(partitioner="iid", num_clients=7, seed=4))
    sizes = np.bincount(a.client)
    assert sizes.size == 7 and sizes.max() - sizes.min() <= 1 and sizes.sum() == ROWS - 60
    np.testing.assert_array_equal(a.client, again.client)
    assert not np.array_equal(a.client, other.client)
    assert not np.array_equal(a.x, other.x)  # another seed, other server rows too


def test_dirichlet_skews_labels_and_is_seeded(tmp_path):
    path = _write(_frame().drop(columns="client"), tmp_path / "d.csv")
    skewed = load_file(path, _settings(partitioner="dirichlet", num_clients=6, alpha=0.1))
    again = load_file(path, _settings(partitioner="dirichlet", num_clients=6, alpha=0.1))
    iid = load_file(path, _settings(partitioner="iid", num_clients=6))
    np.testing.assert_array_equal(skewed.client, again.client)

    def top_label_share(data):
        return np.mean([np.bincount(data.y[data.client == c], minlength=K).max()
                        / np.sum(data.client == c) for c in data.client_ids()])

    assert top_label_share(skewed) > 0.75 > 0.5 > top_label_share(iid)


def test_the_global_rng_is_never_used(tmp_path):
    path = _write(_frame().drop(columns="client"), tmp_path / "d.csv")
    np.random.seed(12345)
    before = np.random.get_state()[1].copy()
    for partitioner in ("iid", "dirichlet"):
        load_file(path, _settings(partitioner=partitioner, num_clients=5))
    assert np.array_equal(np.random.get_state()[1], before)


def test_the_server_fraction_is_a_seeded_disjoint_draw(tmp_path):
    frame = _frame()
    frame["f1"] = np.arange(ROWS, dtype=float)  # a row id to follow the rows
    path = _write(frame, tmp_path / "d.csv")
    data = load_file(path, _settings(server_fraction=0.25, seed=5))
    again = load_file(path, _settings(server_fraction=0.25, seed=5))
    server_rows, client_rows = set(data.server_x[:, 0]), set(data.x[:, 0])
    assert len(server_rows) == 150 and len(client_rows) == ROWS - 150
    assert server_rows.isdisjoint(client_rows) and server_rows | client_rows == set(range(ROWS))
    np.testing.assert_array_equal(data.server_x, again.server_x)
    np.testing.assert_array_equal(data.server_y, frame["label"].to_numpy()[
        data.server_x[:, 0].astype(int)])


def test_a_server_file_is_matched_by_column_name_and_labels_are_coded(tmp_path):
    frame = _frame()
    frame["label"] = np.array(["cat", "dog", "eel"])[frame["label"]]
    server = frame.drop(columns="client").iloc[:30][["label", "f2", "f1"]]  # reordered
    _write(server, tmp_path / "s.csv")
    data = load_file(_write(frame, tmp_path / "d.csv"),
                     _settings(server_fraction=0.0, server_path="s.csv"))
    np.testing.assert_allclose(data.server_x, frame[["f1", "f2"]].to_numpy()[:30])
    assert data.y.dtype == np.int64 and set(data.y) == {0, 1, 2}
    np.testing.assert_array_equal(data.server_y, data.y[:30])  # one coding for both


def test_features_select_columns_and_the_label_is_never_a_feature(tmp_path):
    frame = _frame().assign(city="x", extra=1.0)
    path = _write(frame, tmp_path / "d.csv")
    _write(_server(), tmp_path / "s.csv")
    data = load_file(path, _settings(features=("f2", "f1"), server_fraction=0.0,
                                     server_path="s.csv"))
    np.testing.assert_allclose(data.x, frame[["f2", "f1"]].to_numpy())
    np.testing.assert_allclose(data.server_x, _server()[["f2", "f1"]].to_numpy())
    everything = load_file(_write(frame.drop(columns="city"), tmp_path / "e.csv"), _settings())
    assert everything.x.shape[1] == 3  # f1, f2, extra; not client, not label


def test_tsv_gzip_and_a_set_delimiter_read_the_same_table(tmp_path):
    frame = _frame()
    base = load_file(_write(frame, tmp_path / "d.csv"), _settings())
    frame.to_csv(tmp_path / "d.tsv", sep="\t", index=False)
    frame.to_csv(tmp_path / "d.csv.gz", index=False)
    frame.to_csv(tmp_path / "semi.csv", sep=";", index=False)
    for name, settings in (("d.tsv", _settings()), ("d.csv.gz", _settings()),
                           ("semi.csv", _settings(delimiter=";"))):
        other = load_file(tmp_path / name, settings)
        np.testing.assert_array_equal(other.x, base.x)
        np.testing.assert_array_equal(other.client, base.client)


def test_npz_files_load_as_before(tmp_path):
    frame, server = _frame(), _server()
    path = save_npz(tmp_path / "d.npz", x=frame[["f1", "f2"]].to_numpy(),
                    client=frame["client"].to_numpy(), y=frame["label"].to_numpy(),
                    server_x=server[["f1", "f2"]].to_numpy())
    data = load_file(path, TableSettings())
    np.testing.assert_array_equal(data.client, frame["client"])
    np.testing.assert_array_equal(data.x, frame[["f1", "f2"]].to_numpy())
    assert data.server_y is None and data.server_x.shape == (60, 2)


# ---- malformed files: one line naming the file, nothing changed, nothing run ---------

def _file(name: str, content: str | bytes):
    def make(d):
        path = d / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
        return path
    return make


def _csv_text(text: str):
    return _file("data.csv", text)


def _table(frame_fn, name="data.csv"):
    return lambda d: _write(frame_fn(_frame()), d / name)


def _with(frame: pd.DataFrame, **changes) -> pd.DataFrame:
    frame = frame.copy()
    for column, (row, value) in changes.items():
        if column not in frame:
            frame[column] = 1.0
        frame[column] = frame[column].astype(object if isinstance(value, str) else float)
        frame.loc[row, column] = value
    return frame


def _npz(**arrays):
    def make(d):
        path = d / "data.npz"
        with path.open("wb") as fh:
            np.savez(fh, **arrays)
        return path
    return make


def _two(data_fn, server_fn, server_name="server.csv"):
    def make(d):
        server_fn(d / server_name)
        return data_fn(d)
    return make


X2 = np.zeros((6, 2))
SERVER = "data.server-fraction=0.2"
MALFORMED = {
    "missing-client-column": (_table(lambda f: f.drop(columns="client")), [SERVER],
                              "has no client column 'client'"),
    "non-numeric-column": (_table(lambda f: f.assign(city="Paris")), [SERVER],
                           "column 'city' is not numeric"),
    "nan": (_table(lambda f: _with(f, f2=(3, np.nan))), [SERVER],
            "1 empty or NaN cell(s) in feature column(s) 'f2'"),
    "inf": (_table(lambda f: _with(f, f1=(3, np.inf))), [SERVER],
            "1 infinite value(s) in feature column(s) 'f1'"),
    "empty-client": (_csv_text("client,f1,f2\n1,0.5,0.5\n,0.1,0.2\n2,0.3,0.3\n"), [SERVER],
                     "column 'client' has 1 empty cell(s)"),
    "one-row": (_csv_text("client,f1,f2\n1,0.5,0.5\n"), [SERVER], "has only 1 data row"),
    "header-only": (_csv_text("client,f1,f2\n"), [SERVER], "has a header but no data rows"),
    "empty-file": (_csv_text(""), [SERVER], "is empty (no header line)"),
    "wrong-delimiter": (_csv_text("client;f1;f2\n1;0.5;0.5\n2;0.1;0.2\n"), [SERVER],
                        "set data.delimiter=';'"),
    "ragged-rows": (_csv_text("client,f1,f2\n1,0.5,0.5\n2,0.1,0.2,9\n3,1,1\n"), [SERVER],
                    "Expected 3 fields in line 3, saw 4"),
    "duplicate-column": (_csv_text("client,f1,f1\n1,0.5,0.5\n2,0.1,0.2\n"), [SERVER],
                         "duplicate column name(s) 'f1'"),
    "binary-file": (_file("data.csv", b"\xff\xfe\x00\x81" * 64), [SERVER],
                    "is not UTF-8 text"),
    "not-parquet": (_file("data.parquet", "client,f1\n1,2\n"), [SERVER],
                    "cannot be read as Parquet"),
    "unknown-extension": (_file("data.xlsx", "client,f1\n1,2\n"), [SERVER],
                          "has an unknown extension '.xlsx'"),
    "server-file-other-d": (
        _two(_table(lambda f: f), lambda p: _write(_server().assign(f3=1.0), p)),
        ["data.server-path=server.csv", "data.label-column=label"],
        "server.csv: has d=3 feature columns but the data file data.csv has d=2"),
    "server-file-missing": (_table(lambda f: f), ["data.server-path=nope.csv"],
                            "nope.csv: does not exist (data.server-path)"),
    "server-file-non-numeric": (
        _two(_table(lambda f: f), lambda p: _write(_server().assign(f2="a"), p)),
        ["data.server-path=server.csv", "data.label-column=label"],
        "server.csv: column 'f2' is not numeric"),
    "no-server-data": (_table(lambda f: f), [], "has no server data"),
    "two-server-sources": (
        _two(_table(lambda f: f), lambda p: _write(_server(), p)),
        ["data.server-path=server.csv", SERVER],
        "has server data from data.server-path and data.server-fraction: keep one"),
    "server-fraction-too-small": (_table(lambda f: f.iloc[:10]), ["data.server-fraction=0.01"],
                                  "leaves 0 server row(s)"),
    "missing-label-column": (_table(lambda f: f.drop(columns="label")),
                             [SERVER, "data.label-column=label"], "has no label column 'label'"),
    "missing-feature-column": (_table(lambda f: f), [SERVER, "data.features=[f1,f9]"],
                               "has no column(s) 'f9' named in data.features"),
    "more-clients-than-rows": (_table(lambda f: f.drop(columns="client").iloc[:12]),
                               [SERVER, "partitioner=iid", "data.num-clients=50"],
                               "has 10 client rows, fewer than data.num-clients=50"),
    "dirichlet-empty-client": (
        _table(lambda f: f.drop(columns="client").iloc[:12]),
        [SERVER, "partitioner=dirichlet", "data.label-column=label", "data.num-clients=10",
         "data.dirichlet-alpha=0.01"], "partitioner=dirichlet left a client without rows"),
    "npz-not-an-archive": (_file("data.npz", "hello"), [], "is not an .npz archive"),
    "npz-without-client": (_npz(x=X2, server_x=X2), [], "has no key 'client'"),
    "npz-unknown-key": (_npz(x=X2, client=np.arange(6), server_x=X2, z=X2), [],
                        "has unknown key(s) ['z']"),
    "npz-dirichlet-without-labels": (_npz(x=X2, server_x=X2),
                                     ["partitioner=dirichlet", "data.num-clients=2"],
                                     "has no labels (key 'y')"),
}


#: The row of docs/own-data.md's error table that documents each case.
DOCUMENTED = {
    "missing-client-column": "no client column", "non-numeric-column": "a non-numeric column",
    "nan": "NaN or empty cells", "inf": "infinite values", "empty-client": "an empty client id",
    "one-row": "one row", "header-only": "a header only", "empty-file": "an empty file",
    "wrong-delimiter": "the wrong delimiter", "ragged-rows": "ragged rows",
    "duplicate-column": "duplicate column names", "binary-file": "a binary file named `.csv`",
    "not-parquet": "not a Parquet file", "unknown-extension": "an unknown extension",
    "server-file-other-d": "a server file with another d",
    "server-file-missing": "the server's file does not exist",
    "no-server-data": "no server data", "two-server-sources": "two server sources",
    "server-fraction-too-small": "a server fraction too small",
    "missing-label-column": "no label column",
    "missing-feature-column": "a feature that is not there",
    "more-clients-than-rows": "more clients than rows",
    "dirichlet-empty-client": "a Dirichlet split left a client empty",
    "npz-not-an-archive": "not an `.npz` archive",
    "npz-without-client": "an `.npz` file without `client`",
    "npz-unknown-key": "an `.npz` file with another key",
    "npz-dirichlet-without-labels": "`dirichlet` without labels",
}


#: Cases the table shows by another example of the same message.
SAME_AS_ROW = {"server-file-non-numeric"}


def _error_table() -> dict[str, str]:
    """docs/own-data.md's error table: problem -> message (after ``data file PATH: ``)."""
    text = (Path(__file__).parents[2] / "docs" / "own-data.md").read_text()
    table = text.split("## The errors", 1)[1].split("\n\n| problem |", 1)[1]
    rows = {}
    for line in table.split("\n\n", 1)[0].splitlines()[2:]:
        problem, message = (cell.strip() for cell in line.strip("|").split(" | ", 1))
        rows[problem] = message.strip("`")
    return rows


def _documented(pattern: str, message: str) -> bool:
    """``message`` is ``pattern`` with each ``...`` standing for any text."""
    regex = ".*".join(re.escape(piece) for piece in pattern.split("..."))
    return re.fullmatch(regex, message) is not None


def test_every_row_of_the_error_table_is_a_tested_case():
    assert sorted(_error_table()) == sorted(DOCUMENTED.values())
    assert set(MALFORMED) == set(DOCUMENTED) | SAME_AS_ROW


def test_a_missing_data_path_is_refused_as_the_docs_say(tmp_path):
    with pytest.raises(ConfigError) as info:
        run([*RUN, f"data.path={tmp_path / 'mine.csv'}", f"output-dir={tmp_path / 'out'}"])
    assert str(info.value) == (
        "config key 'data.path' must name an existing data file (.csv, .tsv, .parquet or "
        f"{'.npz'}), got '{tmp_path / 'mine.csv'}' (resolved to {tmp_path / 'mine.csv'})")
    text = " ".join((Path(__file__).parents[2] / "docs" / "own-data.md").read_text().split())
    assert ("`config key 'data.path' must name an existing data file (.csv, .tsv, .parquet or "
            ".npz), got 'mine.csv' (resolved to /abs/mine.csv)`") in text


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_file_is_one_line_naming_it_and_nothing_runs(tmp_path, case):
    make, overrides, fragment = MALFORMED[case]
    path = make(tmp_path)
    before = {p: (_digest(p), p.stat().st_mtime_ns) for p in tmp_path.iterdir()}
    with pytest.raises(ConfigError) as info:
        run([*RUN, "k=2", f"data.path={path}", *overrides, f"output-dir={tmp_path / 'out'}"])
    message = str(info.value)
    assert isinstance(info.value, DataFileError), message
    assert "\n" not in message and message.startswith("data file ")
    assert str(tmp_path) in message, message  # names the file
    assert fragment in message, message
    problem = message.split(": ", 1)[1]  # after "data file PATH: "
    assert case in SAME_AS_ROW or _documented(_error_table()[DOCUMENTED[case]], problem), problem
    assert {p: (_digest(p), p.stat().st_mtime_ns) for p in tmp_path.iterdir()} == before
    assert not (tmp_path / "out").exists()  # refused before any round


def test_malformed_values_are_counted_never_printed(tmp_path):
    frame = _with(_frame(), f2=(3, np.nan))
    frame.loc[4, "f1"] = 123456.789
    frame["name"] = "secret-name"
    path = _write(frame, tmp_path / "data.csv")
    for features in ("f1,f2", ""):
        with pytest.raises(DataFileError) as info:
            load_file(path, _settings(features=tuple(f for f in features.split(",") if f)))
        assert "123456" not in str(info.value) and "secret" not in str(info.value)


def test_dirichlet_on_a_table_needs_its_label_column(tmp_path):
    path = _write(_frame(), tmp_path / "data.csv")
    with pytest.raises(ConfigError, match="data.label-column"):
        run([*RUN, f"data.path={path}", SERVER, *_split("dirichlet")])


def test_a_key_of_another_data_set_is_refused_not_ignored(tmp_path):
    path = _write(_frame(), tmp_path / "data.csv")
    with pytest.raises(ConfigError, match=r"^config key 'data.dim' does nothing with "
                                          r"data.name='file', got 5: remove it"):
        run([*RUN, f"data.path={path}", SERVER, "data.dim=5"])
    with pytest.raises(ConfigError, match="^config key 'data.num-clients' does nothing"):
        run([*RUN, f"data.path={path}", SERVER, "data.num-clients=8"])  # natural-id


def test_a_partitioner_needs_a_data_file():
    with pytest.raises(ConfigError, match="data.partitioner"):
        run(["partitioner=iid"])


FLOWER_CASES = [("csv", False, "dirichlet"), ("parquet", True, "natural-id"),
                ("npz", False, "iid")]


@pytest.mark.flower
@pytest.mark.slow
@pytest.mark.parametrize("fmt, with_client, partitioner", FLOWER_CASES,
                         ids=["-".join(map(str, c)) for c in FLOWER_CASES])
@pytest.mark.slow
def test_a_data_file_on_the_flower_engine(tmp_path, fmt, with_client, partitioner):
    """`flwr run` on Ray: every SuperNode splits the file alike (same bits as in-process)."""
    path, server = _files(tmp_path, fmt, with_client)
    before = {p: _digest(p) for p in tmp_path.iterdir()}
    common = [*RUN, f"data.path={path}", *server, *_split(partitioner),
              "privacy.reproducible-noise=true"]
    flower = run([*common, "federation.engine=flower", f"output-dir={tmp_path / 'flower'}"])
    inprocess = run([*common, f"output-dir={tmp_path / 'inprocess'}"])
    assert flower["federation"]["num_clients"] == (CLIENTS if with_client else 8)
    assert flower["metrics"]["num_points"] == ROWS
    np.testing.assert_array_equal(np.array(flower["centers"]), np.array(inprocess["centers"]))
    assert {p: _digest(p) for p in before} == before


# ---- docs/own-data.md: its code blocks run as written --------------------------------

DOC = Path(__file__).resolve().parents[2] / "docs" / "own-data.md"


def _blocks(language: str) -> list[str]:
    import re

    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(), flags=re.S)


def _command(line: str, cwd: Path):
    import shlex
    import subprocess
    import sys

    args = shlex.split(line)
    assert args[:3] == ["python", "-m", "fedkmeans.experiment"], line
    return subprocess.run([sys.executable, *args[1:]], cwd=cwd, capture_output=True,
                          text=True, timeout=600)


@pytest.mark.slow
def test_the_worked_example_of_docs_own_data_runs_as_written(tmp_path):
    import subprocess
    import sys

    (python,), commands = _blocks("python"), _blocks("bash")
    subprocess.run([sys.executable, "-c", python], cwd=tmp_path, check=True, timeout=120)
    assert (tmp_path / "clients.csv").is_file() and len(commands) == 2
    results = []
    for command in commands:
        proc = _command(command.strip(), tmp_path)
        assert proc.returncode == 0, proc.stderr[-2000:]
        results.append(json.loads(Path(proc.stdout.strip().splitlines()[-1]).read_text()))
    assert results[0]["metrics"]["num_points"] == 810  # as the page says
    assert results[0]["federation"]["num_clients"] == 30
    assert results[1]["federation"]["num_clients"] == 20
    for result in results:
        assert result["metrics"]["accuracy"] is not None
    (text,) = _blocks("text")
    lines = text.strip().splitlines()
    for command, expected in zip(lines[::2], lines[1::2], strict=True):
        proc = _command(command.removeprefix("$ "), tmp_path)
        assert proc.returncode == 2
        assert proc.stderr.strip().startswith(expected.split(" (options: ...)")[0]), (
            proc.stderr)
