"""The objectstorage backend and backend loading, in this process (no helper)."""

from __future__ import annotations

import gzip

import pytest

from spawnflow import xcoms
from spawnflow.sdk import XComRef
from spawnflow.xcoms.objectstorage import ObjectStorageBackend

REF = XComRef("etl", "manual__2026-11-30T00:00:00+00:00", "extract", "return_value", 15)
TEXT = '{"rows": [1, 2]}'


def backend(make_settings, path: str, **values) -> ObjectStorageBackend:
    settings = make_settings(**{"core.xcom_backend": "objectstorage",
                                "xcom.objectstorage_path": path, **values})  # fmt: skip
    return ObjectStorageBackend(settings)


def round_trip(store: ObjectStorageBackend, text: str = TEXT) -> tuple[str | None, str]:
    ref = XComRef(REF.dag_id, REF.run_id, REF.task_id, REF.key, len(text.encode()))
    reference = store.store(store.serialize(text, ref=ref), ref=ref)
    if reference is None:
        return None, text
    return reference, store.deserialize(store.load(reference, ref=ref), ref=ref)


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_a_value_round_trips_through_local_files(make_settings, tmp_path, compression):
    store = backend(make_settings, (tmp_path / "xcoms").as_uri(),
                    **{"xcom.objectstorage_compression": compression})  # fmt: skip
    reference, text = round_trip(store)
    assert text == TEXT
    assert reference.startswith((tmp_path / "xcoms").as_uri() + "/etl/")
    written = next((tmp_path / "xcoms").rglob("return_value-*")).read_bytes()
    if compression == "gzip":
        assert reference.endswith(".json.gz")
        assert gzip.decompress(written).decode() == TEXT
    else:
        assert reference.endswith(".json")
        assert written.decode() == TEXT


def test_objects_written_compressed_stay_readable_after_compression_is_turned_off(
    make_settings, tmp_path
):
    path = (tmp_path / "xcoms").as_uri()
    reference, _ = round_trip(backend(make_settings, path,
                                      **{"xcom.objectstorage_compression": "gzip"}))  # fmt: skip
    plain = backend(make_settings, path)
    assert plain.deserialize(plain.load(reference, ref=REF), ref=REF) == TEXT


def test_memory_urls_work_within_one_process(make_settings):
    reference, text = round_trip(backend(make_settings, "memory://spawnflow-tests"))
    assert reference.startswith("memory://spawnflow-tests/")
    assert text == TEXT


def test_values_below_the_threshold_stay_inline_and_above_it_are_offloaded(make_settings, tmp_path):
    store = backend(make_settings, (tmp_path / "x").as_uri(),
                    **{"xcom.objectstorage_threshold": "100"})  # fmt: skip
    assert round_trip(store, "1" * 99) == (None, "1" * 99)
    reference, text = round_trip(store, "1" * 100)
    assert reference is not None
    assert text == "1" * 100


def test_purge_deletes_the_object_and_a_deleted_object_is_a_clear_error(make_settings, tmp_path):
    store = backend(make_settings, (tmp_path / "x").as_uri())
    reference, _ = round_trip(store)
    store.purge(reference, ref=REF)
    assert not list((tmp_path / "x").rglob("*.json"))
    store.purge(reference, ref=REF)  # gone already: fine
    with pytest.raises(FileNotFoundError, match=r"was kept at .* which no longer exists"):
        store.load(reference, ref=REF)


def test_an_objectstorage_backend_without_a_path_says_which_setting_to_set(make_settings):
    with pytest.raises(ValueError, match=r"\[xcom\] objectstorage_path is empty"):
        backend(make_settings, "")


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("no_such_module_xyz:Backend", "module 'no_such_module_xyz' cannot be imported"),
        ("spawnflow.sdk.dags:Missing", "has no attribute 'Missing'"),
        ("spawnflow.sdk.dags:Dag", r"is not a subclass of spawnflow\.sdk"),
    ],
)
def test_a_backend_that_cannot_be_loaded_is_named_with_the_reason(name, message):
    with pytest.raises(xcoms.BackendError, match=message):
        xcoms.import_backend(name)


@pytest.mark.parametrize("value", ["nope", "module:", "1module:Class", "a b:C"])
def test_a_malformed_backend_name_is_refused_when_settings_load(make_settings, value):
    from spawnflow.bootstrap.settings import SettingsError

    with pytest.raises(SettingsError, match=r"\[core\] xcom_backend is .* but it must be"):
        make_settings(**{"core.xcom_backend": value})


@pytest.mark.parametrize("key", ["k" * 250, "数据" * 60])
def test_long_and_non_ascii_keys_make_object_names_a_file_system_accepts(
    make_settings, tmp_path, key
):
    store = backend(make_settings, (tmp_path / "x").as_uri())
    ref = XComRef(REF.dag_id, REF.run_id, REF.task_id, key, len(TEXT))
    reference = store.store(store.serialize(TEXT, ref=ref), ref=ref)
    assert store.deserialize(store.load(reference, ref=ref), ref=ref) == TEXT
    other = XComRef(REF.dag_id, REF.run_id, REF.task_id, key[:-1] + "x", len(TEXT))
    assert (
        reference.rsplit("/", 1)[1][:130] != store.store(b"{}", ref=other).rsplit("/", 1)[1][:130]
    )
