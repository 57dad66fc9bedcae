"""The SQL sandbox: decide on Spark's own plans whether a derivative's query may run.

A derivative dataset's SQL comes from a stranger. ``spark.sql(text)`` runs commands eagerly
(``SET``, ``ADD JAR``, ``CREATE VIEW`` execute at call time), so a query is checked *before* it
is handed to ``spark.sql``:

1. **Parse without executing** (``sessionState.sqlParser.parsePlan``). The root must be a
   query, not a command/statement (DDL, DML, ``SET``, ``ADD JAR``, ``LOAD DATA``,
   ``INSERT … DIRECTORY``, ``EXPLAIN``, ``CACHE``…). Every relation named in the parsed plan
   (including CTE bodies and subqueries) must be a single-part name of a registered view or of
   a CTE; multi-part names (``parquet.`/etc```, ``spark_catalog.db.t``, ``global_temp.v``) are
   refused. Functions are checked by name (``reflect``, ``java_method``, ``try_reflect``,
   ``input_file_name``, the XML functions ``xpath*``, the identity functions
   ``current_user``/``user``/``version``…). Partitioning hints (``REPARTITION``,
   ``COALESCE``, ``REPARTITION_BY_RANGE``, ``REBALANCE``) may ask for at most
   :data:`MAX_HINT_PARTITIONS` partitions.
2. **Analyse** the parsed plan and walk the analysed plan: every expression is checked by
   *class* (reflection, UDFs of any kind, script transformation, ``XPath*``, ``CurrentUser``,
   ``SparkVersion``), every leaf relation must be a registered view (``View`` nodes are not
   entered) or a harmless in-memory leaf, and every repartitioning node
   (``Repartition``, ``RepartitionByExpression``, ``RebalancePartitions``) asks for at most
   :data:`MAX_HINT_PARTITIONS` partitions.

Only then is the query executed. The session also runs with ``spark.sql.runSQLOnFiles=false``
and ``spark.sql.variable.substitute=false`` (no ``${env:…}``/``${system:…}`` in the text), and
its JVM with external DTD/schema access disabled (:data:`engine.spark_engine.XML_JAVA_OPTIONS`),
in case an XML function ever got past these checks. See ``docs/spark-engine.md`` ("Sandbox
facts").
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterable, Iterator
from typing import Any

from engine.errors import SandboxViolation

XML_FUNCTIONS = frozenset(
    {
        "xpath",
        "xpath_boolean",
        "xpath_double",
        "xpath_float",
        "xpath_int",
        "xpath_long",
        "xpath_number",
        "xpath_short",
        "xpath_string",
        "from_xml",  # Spark 4 (not in the pinned 3.5): refused should the pin move
        "schema_of_xml",
        "to_xml",
    }
)
"""XML parsing functions, refused by both sandboxes: the JDK parser behind Spark's ``xpath_*``
fetches external DTDs (``file:``, ``http:``); DataFusion has none in its pinned releases and
refuses the same names should a release or an extension add one."""

DENIED_FUNCTIONS = frozenset(
    {
        "reflect",
        "java_method",
        "try_reflect",
        "input_file_name",
        "input_file_block_start",
        "input_file_block_length",
        "current_catalog",
        "current_database",
        "current_schema",
        # facts about the verifier: its OS user, its Spark build
        "current_user",
        "user",
        "session_user",
        "version",
    }
    | XML_FUNCTIONS
)
"""Functions refused by name: reflection; functions that disclose local paths, catalogs, the
verifier's user or build; XML parsing (external entities and DTDs)."""

MAX_HINT_PARTITIONS = 64
"""The most partitions a query may ask for (``/*+ REPARTITION(n) */``, ``COALESCE(n)``,
``REPARTITION_BY_RANGE(n)``, ``REBALANCE(n)``). Every partition is a task: ``REPARTITION(100000)``
over a one-row input ran for more than 8 minutes. The engine itself uses one partition per
input and ``spark.sql.shuffle.partitions = 4``; 64 leaves room for any honest hint."""
_PARTITION_HINTS = frozenset({"repartition", "coalesce", "repartition_by_range", "rebalance"})
_REPARTITION_PLANS = ("Repartition", "RepartitionByExpression", "RebalancePartitions")

_DENIED_EXPR_CLASSES = (
    "CallMethodViaReflection",
    "TryReflect",
    "ScalaUDF",
    "ScalaUDAF",
    "ScalaAggregator",
    "PythonUDF",
    "PythonUDAF",
    "PythonUDTF",
    "HiveSimpleUDF",
    "HiveGenericUDF",
    "HiveGenericUDTF",
    "HiveUDAFFunction",
    "InputFileName",
    "InputFileBlockStart",
    "InputFileBlockLength",
    "CurrentUser",
    "SparkVersion",
    "XmlToStructs",
    "SchemaOfXml",
    "StructsToXml",
)
_DENIED_EXPR_PREFIXES = ("XPath",)
"""``XPathList``, ``XPathString``, ``XPathBoolean``… (one class per ``xpath_*`` function)."""
_DENIED_PLAN_CLASSES = (
    "ScriptTransformation",
    "InsertIntoStatement",
    "InsertIntoDir",
    "MapInPandas",
    "FlatMapGroupsInPandas",
    "MapInArrow",
    "PythonMapInArrow",
    "AttachDistributedSequence",
    "UnresolvedTableValuedFunction",
    "UnresolvedTVFAliases",
)
_HARMLESS_LEAVES = ("OneRowRelation", "LocalRelation", "Range", "CTERelationRef", "CTERelationDef")

_PKG = "org.apache.spark.sql.catalyst"


def _seq(jseq: Any) -> Iterator[Any]:
    """Iterate a Scala ``Seq`` through py4j."""
    it = jseq.iterator()
    while it.hasNext():
        yield it.next()


def _simple_name(jobj: Any) -> str:
    return str(jobj.getClass().getSimpleName()).rstrip("$")


class _Walker:
    """Walks Catalyst plans and expressions through py4j."""

    def __init__(self, jvm: Any) -> None:
        cls = jvm.java.lang.Class.forName
        self._command = cls(f"{_PKG}.plans.logical.Command")
        self._subquery = cls(f"{_PKG}.expressions.SubqueryExpression")
        self._unresolved_with = cls(f"{_PKG}.plans.logical.UnresolvedWith")
        self._unresolved_relation = cls(f"{_PKG}.analysis.UnresolvedRelation")
        self._unresolved_function = cls(f"{_PKG}.analysis.UnresolvedFunction")
        self._unresolved_hint = cls(f"{_PKG}.plans.logical.UnresolvedHint")
        self._view = cls(f"{_PKG}.plans.logical.View")
        self._leaf = cls(f"{_PKG}.plans.logical.LeafNode")

    def is_command(self, plan: Any) -> bool:
        return bool(self._command.isInstance(plan))

    def plans(self, plan: Any, *, into_views: bool) -> Iterator[Any]:
        """Every plan node under ``plan``: children, CTE bodies and subquery plans."""
        stack = [plan]
        while stack:
            node = stack.pop()
            yield node
            if not into_views and self._view.isInstance(node):
                continue
            stack.extend(_seq(node.children()))
            if self._unresolved_with.isInstance(node):
                stack.extend(pair._2() for pair in _seq(node.cteRelations()))
            for expr in _seq(node.expressions()):
                for e in self.expressions(expr):
                    if self._subquery.isInstance(e):
                        stack.append(e.plan())

    def expressions(self, expr: Any) -> Iterator[Any]:
        stack = [expr]
        while stack:
            e = stack.pop()
            yield e
            stack.extend(_seq(e.children()))


_WALKERS: dict[int, _Walker] = {}


def _walker(jvm: Any) -> _Walker:
    """One walker (its resolved classes) per JVM gateway."""
    w = _WALKERS.get(id(jvm))
    if w is None:
        w = _WALKERS[id(jvm)] = _Walker(jvm)
    return w


def _multipart(jseq: Any) -> list[str]:
    return [str(p) for p in _seq(jseq)]


def check_query(spark: Any, sql: str, views: set[str], *, ctes_ok: bool = True) -> None:
    """Refuse ``sql`` unless it is a plain SELECT over ``views``; never executes it.

    Args:
        spark: the PySpark ``SparkSession`` the query would run in.
        sql: one query step.
        views: names (case-insensitive) of the temp views the query may read.
        ctes_ok: allow ``WITH`` common table expressions.

    Raises:
        SandboxViolation: with the reason.
    """
    jss = spark._jsparkSession
    jvm = spark._jvm
    walker = _walker(jvm)
    try:
        parsed = jss.sessionState().sqlParser().parsePlan(sql)
    except Exception as e:
        raise SandboxViolation(f"cannot parse the query: {_java_message(e)}") from None
    root = _simple_name(parsed)
    if walker.is_command(parsed) or root in _DENIED_PLAN_CLASSES:
        raise SandboxViolation(f"only SELECT queries are allowed, got {root}")
    allowed = {v.lower() for v in views}
    parsed_nodes = list(walker.plans(parsed, into_views=True))
    readable = allowed | _cte_names(walker, parsed_nodes, ctes_ok=ctes_ok)
    for node in parsed_nodes:
        _check_parsed_node(walker, node, readable)
    try:
        none = getattr(jvm.scala, "None$").__getattr__("MODULE$")
        tracker = jvm.org.apache.spark.sql.catalyst.QueryPlanningTracker(none)
        analyzed = jss.sessionState().analyzer().executeAndCheck(parsed, tracker)
    except Exception as e:
        raise SandboxViolation(f"query does not analyse: {_java_message(e)}") from None
    for node in walker.plans(analyzed, into_views=False):
        _check_analyzed_node(walker, node, allowed)


def _cte_names(walker: Any, parsed_nodes: list[Any], *, ctes_ok: bool) -> set[str]:
    """The (lower-cased) names the query's ``WITH`` clauses define; refused unless ``ctes_ok``."""
    names: set[str] = set()
    for node in parsed_nodes:
        if walker._unresolved_with.isInstance(node):
            if not ctes_ok:
                raise SandboxViolation("common table expressions are not allowed")
            names.update(str(p._1()).lower() for p in _seq(node.cteRelations()))
    return names


def _check_parsed_node(walker: Any, node: Any, readable: set[str]) -> None:
    """Refuse one node of the parsed plan: commands, hints, relations and functions.

    ``readable`` holds the input views and the query's CTE names, lower-cased.
    """
    name = _simple_name(node)
    if walker.is_command(node) or name in _DENIED_PLAN_CLASSES:
        raise SandboxViolation(f"{name} is not allowed in a query")
    if walker._unresolved_hint.isInstance(node):
        _check_hint(str(node.name()), list(_seq(node.parameters())))
    if walker._unresolved_relation.isInstance(node):
        parts = _multipart(node.multipartIdentifier())
        if len(parts) != 1:
            raise SandboxViolation(
                f"relation {'.'.join(parts)!r} is not an input (qualified names and "
                "path-based relations are not allowed)"
            )
        if parts[0].lower() not in readable:
            raise SandboxViolation(f"relation {parts[0]!r} is not an input of the transform")
    for expr in _seq(node.expressions()):
        for ex in walker.expressions(expr):
            if walker._unresolved_function.isInstance(ex):
                fparts = _multipart(ex.nameParts())
                fname = fparts[-1].lower()
                if len(fparts) != 1:
                    raise SandboxViolation(f"function {'.'.join(fparts)!r} is not allowed")
                if fname in DENIED_FUNCTIONS:
                    raise SandboxViolation(f"function {fname}() is not allowed")


def _check_analyzed_node(walker: Any, node: Any, allowed: set[str]) -> None:
    """Refuse one node of the analysed plan: views, leaves, repartitions and expressions.

    ``allowed`` holds the input views, lower-cased.
    """
    name = _simple_name(node)
    if walker.is_command(node) or name in _DENIED_PLAN_CLASSES:
        raise SandboxViolation(f"{name} is not allowed in a query")
    if walker._view.isInstance(node):
        view = str(node.desc().identifier().table()).lower()
        if view not in allowed:
            raise SandboxViolation(f"view {view!r} is not an input of the transform")
        return
    if walker._leaf.isInstance(node) and name not in _HARMLESS_LEAVES:
        raise SandboxViolation(f"relation {name} is not an input of the transform")
    if name in _REPARTITION_PLANS and int(node.numPartitions()) > MAX_HINT_PARTITIONS:
        raise SandboxViolation(
            f"{name} into {int(node.numPartitions())} partitions is not allowed (at most "
            f"{MAX_HINT_PARTITIONS})"
        )
    for expr in _seq(node.expressions()):
        for ex in walker.expressions(expr):
            ename = _simple_name(ex)
            if (
                ename in _DENIED_EXPR_CLASSES
                or ename.startswith(_DENIED_EXPR_PREFIXES)
                or "UDF" in ename
            ):
                raise SandboxViolation(f"expression {ename} is not allowed")


def _check_hint(name: str, parameters: list[Any]) -> None:
    """Refuse a partitioning hint that asks for more than :data:`MAX_HINT_PARTITIONS`.

    The parser keeps a hint's numeric parameter as a Java ``Integer`` (or a literal expression);
    column parameters are expressions and do not count.
    """
    if name.lower() not in _PARTITION_HINTS:
        return
    for p in parameters:
        value: Any = p
        if not isinstance(value, int) and hasattr(value, "value"):
            try:
                value = value.value()  # a Literal
            except Exception:
                continue
        if isinstance(value, int) and not isinstance(value, bool) and value > MAX_HINT_PARTITIONS:
            raise SandboxViolation(
                f"hint {name.upper()}({value}) is not allowed: at most {MAX_HINT_PARTITIONS} "
                "partitions"
            )


class VerdictCache:
    """Remembers queries the sandbox *accepted*, keyed by everything the verdict depends on.

    :func:`check_query`'s verdict is a function of the SQL text, ``ctes_ok``, the names of the
    visible views and their schemas (the analysed plan does not enter ``View`` nodes), the
    session's SQL settings (fixed by the engine for every request) and the Spark version (fixed
    per process). A derivative's query is the same for every block it replays, so a verify of N
    blocks walks the plans once instead of N times (each walk costs hundreds of py4j round
    trips). The caller passes ``context``: a hashable value that pins the schemas of the views
    (e.g. the input views' schema JSON and the preceding query steps). Refusals are never
    cached, so a hostile query is walked every time it is submitted. Bounded LRU.
    """

    def __init__(self, max_entries: int = 1024) -> None:
        self.max_entries = max_entries
        self.hits = 0
        """Checks answered from the cache (tests and metrics)."""
        self.misses = 0
        """Checks that walked the plans."""
        self._accepted: OrderedDict[Hashable, None] = OrderedDict()
        self._lock = threading.Lock()

    def check(
        self,
        spark: Any,
        sql: str,
        views: Iterable[str],
        context: Hashable,
        *,
        ctes_ok: bool = True,
    ) -> None:
        """:func:`check_query`, skipped when the same check already passed in ``context``.

        Raises:
            SandboxViolation: with the reason (never cached).
        """
        names = {v.lower() for v in views}
        key = (sql, ctes_ok, tuple(sorted(names)), context)
        with self._lock:
            if key in self._accepted:
                self._accepted.move_to_end(key)
                self.hits += 1
                return
            self.misses += 1
        check_query(spark, sql, names, ctes_ok=ctes_ok)
        with self._lock:
            self._accepted[key] = None
            while len(self._accepted) > self.max_entries:
                self._accepted.popitem(last=False)

    def clear(self) -> None:
        """Forget every verdict."""
        with self._lock:
            self._accepted.clear()


_NONDET_PLANS = {
    "Aggregate": "aggregation: output order depends on hash-aggregate internals",
    "Distinct": "DISTINCT: output order depends on hash-aggregate internals",
    "Join": "join: output order depends on the join strategy",
    "Union": "set operation: order depends on the plan",
    "Intersect": "set operation: order depends on the plan",
    "Except": "set operation: order depends on the plan",
    "Sample": "sampling",
}
_NONDET_FUNCTIONS = {
    "rand": "random function",
    "randn": "random function",
    "random": "random function",
    "uuid": "random function",
    "shuffle": "random function",
    "current_timestamp": "current time function",
    "current_date": "current time function",
    "now": "current time function",
    "localtimestamp": "current time function",
    "current_timezone": "session-dependent function",
    "unix_timestamp": "current time function (without arguments)",
}


def nondeterminism(spark: Any, sql: str) -> tuple[str, ...]:
    """Why ``sql`` may not replay deterministically, read from Spark's parsed plan.

    Plan nodes (aggregation, join, set operations, sampling) and functions (random, current
    time) are recognised by class and resolved name, not by text; window expressions
    (``UnresolvedWindowExpression``/``WindowExpression``) count as well. Unparseable SQL gives
    no reasons (the sandbox reports it).
    """
    jss = spark._jsparkSession
    walker = _walker(spark._jvm)
    try:
        parsed = jss.sessionState().sqlParser().parsePlan(sql)
    except Exception:
        return ()
    reasons: list[str] = []
    for node in walker.plans(parsed, into_views=True):
        name = _simple_name(node)
        if name in _NONDET_PLANS and _NONDET_PLANS[name] not in reasons:
            reasons.append(_NONDET_PLANS[name])
        for expr in _seq(node.expressions()):
            for ex in walker.expressions(expr):
                ename = _simple_name(ex)
                reason = None
                if "WindowExpression" in ename:
                    reason = "window function: may depend on the slice boundaries and order"
                elif walker._unresolved_function.isInstance(ex):
                    fname = _multipart(ex.nameParts())[-1].lower()
                    if fname == "unix_timestamp" and ex.arguments().size() > 0:
                        continue
                    reason = _NONDET_FUNCTIONS.get(fname)
                    if ex.isDistinct() and reason is None:
                        reason = _NONDET_PLANS["Distinct"]
                if reason is not None and reason not in reasons:
                    reasons.append(reason)
    return tuple(reasons)


def _java_message(e: Exception) -> str:
    text = str(e)
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith(": "):
            return line[2:][:500]
    return text.splitlines()[0][:500] if text else type(e).__name__


__all__ = [
    "DENIED_FUNCTIONS",
    "MAX_HINT_PARTITIONS",
    "SandboxViolation",
    "VerdictCache",
    "check_query",
    "nondeterminism",
]
