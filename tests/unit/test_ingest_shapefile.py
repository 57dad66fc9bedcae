"""The ``EsriShapefile`` read step (``coordinator/ingest/esri_shapefile.py``).

kamu-cli's cases (``src/infra/ingest-datafusion/tests/tests/test_reader_shapefile.rs``) on an
equivalent archive built in code (``tests/shapefiles.py``): rows with a schema, ``subPath``
present and missing, the geometry of one region; then kamu's value forms per dBase type, the
archive's ``.shp`` located, and every refusal (a typed error, nothing read).
"""

from __future__ import annotations

import io
import json
import struct
import zipfile
from pathlib import Path

import pytest
import shapefile as pyshp
from shapefiles import (
    one_point_zip,
    places_zip,
    regions_members,
    regions_zip,
    shapefile_members,
    zip_members,
)

from coordinator.errors import BadInputData, DecompressBudgetExceeded, UnsupportedReadOption
from coordinator.ingest.esri_shapefile import json_number, locate_shp
from coordinator.ingest.readers import read_batches, read_schema
from coordinator.metadata import model as m


def rows(step: m.ReadStep, data: bytes, tmp_path: Path, **kw: int) -> list[dict[str, object]]:
    p = tmp_path / "input.zip"
    p.write_bytes(data)
    out: list[dict[str, object]] = []
    for batch in read_batches(step, p, **kw):  # type: ignore[arg-type]
        assert batch.schema == read_schema(step)
        out.extend(batch.to_pylist())
    return out


NAMES = ("iso STRING NOT NULL", "name_0 STRING NOT NULL", "name_1 STRING NOT NULL")


# -- kamu-cli test_reader_shapefile.rs --------------------------------------------------------


def test_read_shapefile_with_schema(tmp_path: Path) -> None:
    got = rows(m.ReadStepEsriShapefile(ddl_schema=NAMES), regions_zip(), tmp_path)
    assert got == [
        {"iso": "UKR", "name_0": "Ukraine", "name_1": name}
        for name in ("Cherkasy", "Chernihiv", "Crimea", "Kiev City")
    ]


def test_read_shapefile_without_a_schema_is_refused(tmp_path: Path) -> None:
    # kamu infers the schema (its test_read_shapefile_infer_schema); this node reads only
    # with a declared one, for every read step.
    with pytest.raises(UnsupportedReadOption, match="no schema"):
        rows(m.ReadStepEsriShapefile(), regions_zip(), tmp_path)


def test_read_shapefile_with_subpath_exists(tmp_path: Path) -> None:
    step = m.ReadStepEsriShapefile(ddl_schema=NAMES, sub_path="regions.shp")
    assert len(rows(step, regions_zip(), tmp_path)) == 4


def test_read_shapefile_with_subpath_missing(tmp_path: Path) -> None:
    step = m.ReadStepEsriShapefile(ddl_schema=NAMES, sub_path="invalid.shp")
    with pytest.raises(
        BadInputData, match=r"(?s)any \.shp files under 'invalid\.shp'.*regions\.shp"
    ):
        rows(step, regions_zip(), tmp_path)


def test_read_shapefile_geom(tmp_path: Path) -> None:
    step = m.ReadStepEsriShapefile(ddl_schema=("geometry STRING", "name_1 STRING"))
    got = {r["name_1"]: r["geometry"] for r in rows(step, regions_zip(), tmp_path)}
    geojson = json.loads(str(got["Kiev City"]))
    geojson["coordinates"][0][0] = geojson["coordinates"][0][0][:2]
    assert geojson == {
        "type": "MultiPolygon",
        "coordinates": [
            [[[30.466304779052763, 50.587009429931804], [30.466583251953324, 50.58112716674821]]]
        ],
    }
    # The exact text: compact, keys sorted (serde_json), every polygon a MultiPolygon; a
    # counter-clockwise ring is a hole of the polygon before it, a clockwise one a new polygon.
    square = "[[0.0,0.0],[0.0,10.0],[10.0,10.0],[10.0,0.0],[0.0,0.0]]"
    assert got["Cherkasy"] == '{"coordinates":[[' + square + ']],"type":"MultiPolygon"}'
    assert got["Chernihiv"] == (
        '{"coordinates":[[' + square + ",[[2.0,2.0],[4.0,2.0],[4.0,4.0],[2.0,4.0],[2.0,2.0]]]],"
        '"type":"MultiPolygon"}'
    )
    assert got["Crimea"] == (
        '{"coordinates":[[' + square + "],[[[20.0,0.0],[20.0,1.5],[21.5,1.5],[20.0,0.0]]]],"
        '"type":"MultiPolygon"}'
    )


# -- value forms --------------------------------------------------------------------------------


def test_numeric_fields_and_an_always_empty_field(tmp_path: Path) -> None:
    step = m.ReadStepEsriShapefile(
        ddl_schema=("name_1 STRING", "id_1 BIGINT", "ccn_1 DOUBLE", "cca_1 STRING")
    )
    got = rows(step, regions_zip(), tmp_path)
    # N fields are doubles for kamu (12.0); whole ones fit an integer column too.
    assert [(r["id_1"], r["ccn_1"], r["cca_1"]) for r in got] == [
        (1, 0.0, None),
        (2, 12.5, None),
        (3, -1.25, None),
        (11, 0.0, None),
    ]
    with pytest.raises(BadInputData, match="ccn_1") as e:
        rows(m.ReadStepEsriShapefile(ddl_schema=("ccn_1 BIGINT",)), regions_zip(), tmp_path)
    assert e.value.row == 2  # 12.5


def test_every_dbase_type_pyshp_writes(tmp_path: Path) -> None:
    step = m.ReadStepEsriShapefile(
        ddl_schema=(
            "name STRING",
            "population BIGINT",
            "area DOUBLE",
            "density DOUBLE",
            "capital BOOLEAN",
            "founded STRING",
            "geometry STRING",
        )
    )
    assert rows(step, places_zip(), tmp_path) == [
        {
            "name": "Alpha",
            "population": 1000,
            "area": 12.5,
            # F fields are single precision in the dbase crate: 0.1 as an f32, widened.
            "density": 0.10000000149011612,
            "capital": True,
            # kamu's form of a D field: not zero-padded.
            "founded": "2024-3-7",
            "geometry": '{"coordinates":[1.0,2.0],"type":"Point"}',
        },
        {
            "name": "Beta",
            "population": None,
            "area": None,
            "density": None,
            "capital": False,
            "founded": "1999-12-31",
            "geometry": '{"coordinates":[2.0,3.0],"type":"Point"}',
        },
        {
            # C fields are trimmed; pyshp writes a missing date as 00000000, which the dbase
            # crate reads as the date 0-0-0.
            "name": "Gamma",
            "population": 30,
            "area": -0.125,
            "density": 2.5,
            "capital": None,
            "founded": "0-0-0",
            "geometry": '{"coordinates":[3.0,4.0],"type":"Point"}',
        },
    ]


def test_dates_as_a_date_column(tmp_path: Path) -> None:
    step = m.ReadStepEsriShapefile(ddl_schema=("founded DATE",))
    # The first two rows parse as arrow-rs parses "2024-3-7"; "0-0-0" fails, as in kamu.
    with pytest.raises(BadInputData, match="0-0-0") as e:
        rows(step, places_zip(), tmp_path)
    assert e.value.row == 3 and e.value.column == "founded"


def _patch_dbf(data: bytes, patch: dict[int, bytes]) -> bytes:
    """The places archive with bytes of its .dbf replaced (offset -> bytes)."""
    z = zipfile.ZipFile(io.BytesIO(data))
    members = {n: z.read(n) for n in z.namelist()}
    dbf = bytearray(members["places.dbf"])
    for offset, b in patch.items():
        dbf[offset : offset + len(b)] = b
    members["places.dbf"] = bytes(dbf)
    return zip_members(members)


def _first_record(data: bytes) -> int:
    dbf = zipfile.ZipFile(io.BytesIO(data)).read("places.dbf")
    return int(struct.unpack_from("<H", dbf, 8)[0])


def test_deleted_records_are_skipped_as_the_dbase_crate_does(tmp_path: Path) -> None:
    data = places_zip()
    deleted = _patch_dbf(data, {_first_record(data): b"*"})
    step = m.ReadStepEsriShapefile(ddl_schema=("name STRING", "geometry STRING"))
    # The shapes are then paired with the records left, in order (kamu's reader).
    assert [
        (r["name"], json.loads(str(r["geometry"]))["coordinates"])
        for r in rows(step, deleted, tmp_path)
    ] == [("Beta", [1.0, 2.0]), ("Gamma", [2.0, 3.0])]


def test_code_pages(tmp_path: Path) -> None:
    step = m.ReadStepEsriShapefile(ddl_schema=("name STRING",))
    data = places_zip()
    # 0x57 (ANSI, as ArcGIS writes) is not a mark the dbase crate knows: read as UTF-8.
    assert len(rows(step, _patch_dbf(data, {29: b"\x57"}), tmp_path)) == 3
    with pytest.raises(BadInputData, match="code page mark 0x03"):
        rows(step, _patch_dbf(data, {29: b"\x03"}), tmp_path)
    # Declared UTF-8 is strict; no code page is lossy.
    bad = _patch_dbf(data, {_first_record(data) + 1: b"\xff"})
    assert rows(step, bad, tmp_path)[0]["name"] == "\ufffdlpha"
    with pytest.raises(BadInputData, match="invalid UTF-8"):
        rows(step, _patch_dbf(bad, {29: b"\xf0"}), tmp_path)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        # serde_json's f64 text (the zmij crate's layout; cases from its tests)
        (1.0, "1.0"),
        (0.0, "0.0"),
        (-0.0, "-0.0"),
        (0.1, "0.1"),
        (43210.0, "43210.0"),
        (5.444310685350916e14, "544431068535091.6"),
        (-5942736479622170.0, "-5942736479622170.0"),
        (1e16, "1e+16"),
        (3.439070283483335e35, "3.439070283483335e+35"),
        (0.00001, "0.00001"),
        (4e-6, "4e-6"),
        (6.62607015e-34, "6.62607015e-34"),
        (5e-324, "5e-324"),
        (30.466304779052763, "30.466304779052763"),
    ],
)
def test_json_number(value: float, text: str) -> None:
    assert json_number(value) == text
    assert float(text) == value


# -- locating the .shp --------------------------------------------------------------------------


def test_locate_shp() -> None:
    files = ["a/x.shp", "a/x.dbf", "b/y.shp", "b/c/z.shp", "readme.shp.txt", "d/.shp"]
    assert locate_shp(["only.shp", "only.dbf"], None, "in") == "only.shp"
    assert locate_shp(files, "b/y.shp", "in") == "b/y.shp"
    assert locate_shp(files, "a/*.shp", "in") == "a/x.shp"
    assert locate_shp(files, "**/z.shp", "in") == "b/c/z.shp"
    assert locate_shp(files, "a/x.dbf", "in") == "a/x.dbf"  # an exact name, as kamu takes it
    with pytest.raises(BadInputData, match=r"multiple \.shp files\. Specify `subPath`"):
        locate_shp(files, None, "in")
    with pytest.raises(BadInputData, match=r"multiple \.shp files matching sub-path '\*\*'"):
        locate_shp(files, "**", "in")
    with pytest.raises(BadInputData, match=r"does not contain any \.shp files$"):
        locate_shp(["readme.shp.txt", "d/.shp"], None, "in")
    with pytest.raises(BadInputData, match=r"under '\.\./a/x\.shp'"):
        locate_shp(files, "../a/x.shp", "in")


def test_two_shapefiles_need_a_subpath(tmp_path: Path) -> None:
    data = zip_members({**regions_members("a/first"), **regions_members("b/second")})
    with pytest.raises(BadInputData, match=r"(?s)Specify `subPath`.*a/first\.shp.*b/second\.shp"):
        rows(m.ReadStepEsriShapefile(ddl_schema=NAMES), data, tmp_path)
    step = m.ReadStepEsriShapefile(ddl_schema=NAMES, sub_path="b/*.shp")
    assert len(rows(step, data, tmp_path)) == 4


# -- refusals -----------------------------------------------------------------------------------


def test_no_shp_in_the_archive(tmp_path: Path) -> None:
    data = zip_members({"readme.txt": b"no shapes here"})
    with pytest.raises(BadInputData, match=r"does not contain any \.shp files"):
        rows(m.ReadStepEsriShapefile(ddl_schema=NAMES), data, tmp_path)


def test_missing_dbf_not_a_zip_and_corrupt_shp(tmp_path: Path) -> None:
    step = m.ReadStepEsriShapefile(ddl_schema=NAMES)
    members = regions_members()
    no_dbf = {k: v for k, v in members.items() if not k.endswith(".dbf")}
    with pytest.raises(BadInputData, match=r"no 'regions\.dbf' beside 'regions\.shp'"):
        rows(step, zip_members(no_dbf), tmp_path)
    with pytest.raises(BadInputData, match="not a readable zip archive"):
        rows(step, b"PK\x03\x04 not really a zip", tmp_path)
    shp = members["regions.shp"]
    for corrupt, message in [
        (shp[:-7], "truncated"),  # the last shape cut short
        (shp[:150], "truncated"),
        (b"\x00" * 100 + shp[100:], "not a shapefile"),
        (shp[:108] + struct.pack("<i", 99) + shp[112:], "shape 1 has type 99"),
        # the first polygon claims a million points
        (shp[:148] + struct.pack("<i", 1_000_000) + shp[152:], "corrupt"),
    ]:
        data = zip_members({**members, "regions.shp": corrupt})
        with pytest.raises(BadInputData, match=message):
            rows(step, data, tmp_path)


def test_null_shapes_are_refused(tmp_path: Path) -> None:
    def build(w: pyshp.Writer) -> None:
        w.field("city", "C", size=10)
        w.point(1.0, 2.0)
        w.record("A")
        w.null()
        w.record("B")

    data = zip_members(shapefile_members("n", build, pyshp.POINT))
    with pytest.raises(BadInputData, match="NullShape") as e:
        rows(m.ReadStepEsriShapefile(ddl_schema=("city STRING",)), data, tmp_path)
    assert e.value.row == 2


def test_a_zip_bomb_is_stopped_by_the_budget(tmp_path: Path) -> None:
    # 4 MiB of blank text field compresses to a few KiB.
    def build(w: pyshp.Writer) -> None:
        w.field("note", "C", size=250)
        for _ in range(16_000):
            w.point(0.0, 0.0)
            w.record("")

    data = zip_members(shapefile_members("bomb", build, pyshp.POINT))
    assert len(data) < 200_000
    step = m.ReadStepEsriShapefile(ddl_schema=("note STRING",))
    with pytest.raises(DecompressBudgetExceeded, match=r"ingest\.max_decompressed_bytes"):
        rows(step, data, tmp_path, max_decompressed_bytes=1 << 20)
    assert len(rows(step, data, tmp_path, max_decompressed_bytes=16 << 20)) == 16_000


def test_a_record_too_large_is_refused(tmp_path: Path) -> None:
    from coordinator.ingest.esri_shapefile import shapefile_records

    with pytest.raises(BadInputData, match="90 bytes of JSON, more than 64") as e:
        list(
            shapefile_records(
                io.BytesIO(one_point_zip()),
                sub_path=None,
                max_bytes=1 << 20,
                max_record_bytes=64,
                chunk_bytes=1 << 20,
                where="in",
            )
        )
    assert e.value.row == 1


def test_whole_records_in_chunks(tmp_path: Path) -> None:
    from coordinator.ingest.esri_shapefile import shapefile_records

    chunks = list(
        shapefile_records(
            io.BytesIO(places_zip()),
            sub_path=None,
            max_bytes=1 << 20,
            max_record_bytes=1 << 20,
            chunk_bytes=1,
            where="in",
        )
    )
    assert len(chunks) == 3 and all(c.endswith(b"\n") and c.count(b"\n") == 1 for c in chunks)
    assert [json.loads(c)["founded"] for c in chunks] == ["2024-3-7", "1999-12-31", "0-0-0"]
