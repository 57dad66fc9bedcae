"""Small zipped shapefiles for the ``EsriShapefile`` read step, written with pyshp's Writer.

kamu-cli's reader tests (``src/infra/ingest-datafusion/tests/tests/test_reader_shapefile.rs``)
read a checked-in archive of Ukraine's regions (27 polygons with ``iso``, ``name_0``,
``name_1``... fields). :func:`regions_zip` is an equivalent small one built in code: polygon
regions (one with a hole, one of two parts) with text and numeric fields, one of them always
empty (as that file's ``cca_1``); :func:`places_zip` has points with fields of every dBase
type pyshp writes.
"""

from __future__ import annotations

import datetime as dt
import io
import zipfile
from collections.abc import Callable
from typing import Any

import shapefile as pyshp

# Rings: clockwise is an outer ring in a shapefile, counter-clockwise a hole.
SQUARE = [[0.0, 0.0], [0.0, 10.0], [10.0, 10.0], [10.0, 0.0], [0.0, 0.0]]
HOLE = [[2.0, 2.0], [4.0, 2.0], [4.0, 4.0], [2.0, 4.0], [2.0, 2.0]]
ISLAND = [[20.0, 0.0], [20.0, 1.5], [21.5, 1.5], [20.0, 0.0]]
# A region with coordinates as kamu's test checks them (full double precision).
CITY = [
    [30.466304779052763, 50.587009429931804],
    [30.466583251953324, 50.58112716674821],
    [30.1, 50.2],
    [30.466304779052763, 50.587009429931804],
]
REGIONS: list[tuple[str, list[list[list[float]]], int, float]] = [
    # (name_1, rings, id_1, ccn_1)
    ("Cherkasy", [SQUARE], 1, 0.0),
    ("Chernihiv", [SQUARE, HOLE], 2, 12.5),
    ("Crimea", [SQUARE, ISLAND], 3, -1.25),
    ("Kiev City", [CITY], 11, 0.0),
]


def _writer(shape_type: int) -> tuple[pyshp.Writer, dict[str, io.BytesIO]]:
    files = {"shp": io.BytesIO(), "shx": io.BytesIO(), "dbf": io.BytesIO()}
    return pyshp.Writer(**files, shapeType=shape_type), files


def zip_members(members: dict[str, bytes]) -> bytes:
    """A deflated zip of ``members`` (name -> bytes), in order."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return buf.getvalue()


def shapefile_members(
    stem: str, build: Callable[[pyshp.Writer], None], shape_type: int
) -> dict[str, bytes]:
    """``stem.shp``, ``stem.shx`` and ``stem.dbf`` as written by ``build(writer)``."""
    w, files = _writer(shape_type)
    build(w)
    w.close()
    return {f"{stem}.{ext}": f.getvalue() for ext, f in files.items()}


def _regions(w: pyshp.Writer) -> None:
    w.field("iso", "C", size=3)
    w.field("name_0", "C", size=20)
    w.field("name_1", "C", size=40)
    w.field("id_1", "N", size=10, decimal=0)
    w.field("ccn_1", "N", size=12, decimal=2)
    w.field("cca_1", "C", size=10)
    for name, rings, id_1, ccn_1 in REGIONS:
        w.poly(rings)
        w.record("UKR", "Ukraine", name, id_1, ccn_1, "")


def regions_members(stem: str = "regions") -> dict[str, bytes]:
    return shapefile_members(stem, _regions, pyshp.POLYGON)


def regions_zip(extra: dict[str, bytes] | None = None) -> bytes:
    """Four polygon regions (see :data:`REGIONS`) plus a ``.prj`` and a text file, as the
    Ukraine archive has them; ``extra`` members are added."""
    members = regions_members()
    members["regions.prj"] = b'GEOGCS["GCS_WGS_1984"]'
    members["wfsrequest.txt"] = b"not a shapefile"
    members.update(extra or {})
    return zip_members(members)


PLACES: list[tuple[Any, ...]] = [
    # name, population (N 0), area (N 3), density (F), capital (L), founded (D)
    ("Alpha", 1000, 12.5, 0.1, True, dt.date(2024, 3, 7)),
    ("Beta", None, None, None, False, dt.date(1999, 12, 31)),
    (" Gamma", 30, -0.125, 2.5, None, None),
]


def _places(w: pyshp.Writer) -> None:
    w.field("name", "C", size=20)
    w.field("population", "N", size=10, decimal=0)
    w.field("area", "N", size=12, decimal=3)
    w.field("density", "F", size=12, decimal=4)
    w.field("capital", "L")
    w.field("founded", "D")
    for i, values in enumerate(PLACES):
        w.point(1.0 + i, 2.0 + i)
        w.record(*values)


def places_zip(stem: str = "places") -> bytes:
    return zip_members(shapefile_members(stem, _places, pyshp.POINT))


def one_point_zip(city: str = "A", population: int = 1000) -> bytes:
    """One point (1, 2) with ``city`` and ``population``: the read-step case of the polling
    tests."""

    def build(w: pyshp.Writer) -> None:
        w.field("city", "C", size=10)
        w.field("population", "N", size=10, decimal=0)
        w.point(1.0, 2.0)
        w.record(city, population)

    return zip_members(shapefile_members("one", build, pyshp.POINT))
