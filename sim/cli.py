"""``odf-node sim``: run one scenario or a parameter sweep; JSON results and matplotlib plots.

``sim run SCENARIO [--seed N] [--json] [--out DIR] [--set key=value]...`` writes
``DIR/results.json`` and ``DIR/latency_cdf.png`` (``--json`` also prints the results on stdout).
``sim sweep SCENARIO --param adversary.malicious_fraction=0,0.1,0.3 --param policy.name=...``
runs the grid (times ``--seeds``) and writes ``DIR/sweep.json`` plus the detection-time and
cost-vs-safety plots. ``SCENARIO`` is a path or a name in ``sim/scenarios/``.
``sim discovery --nodes N --datasets M --seed S`` measures provider discovery over the DHT
against the one-hop exchange (``sim/discovery.py``). ``sim run internet --nodes N --datasets M
[--no-dht]`` runs the ``internet`` scenario (``sim/internet.py``: discovery and trust at scale).
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Annotated, Any

import typer

from sim.scenario import ScenarioError, load, parse_value
from sim.simulator import run as simulate

sim_app = typer.Typer(help="Network simulations of peer validation.", no_args_is_help=True)


def _overrides(items: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise typer.BadParameter(f"expected key=value, got {item!r}")
        out[key.strip()] = parse_value(value.strip())
    return out


@sim_app.command("run")
def run_cmd(
    scenario: Annotated[str, typer.Argument(help="scenario file or name in sim/scenarios/")],
    seed: Annotated[int | None, typer.Option(help="override the scenario's seed")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="print the results JSON")] = False,
    out: Annotated[Path | None, typer.Option(help="output directory")] = None,
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="override, e.g. adversary.sybils=10")
    ] = None,
    plot: Annotated[bool, typer.Option(help="write the latency CDF plot")] = True,
    cluster: Annotated[
        bool,
        typer.Option(
            "--cluster", help="real-cluster mode: node processes in a loopback-only namespace"
        ),
    ] = False,
    nodes: Annotated[int | None, typer.Option(min=2, help="override the node count")] = None,
    datasets: Annotated[int | None, typer.Option(min=1, help="override the dataset count")] = None,
    dht: Annotated[
        bool | None,
        typer.Option("--dht/--no-dht", help="internet: discovery with the DHT or one-hop only"),
    ] = None,
) -> None:
    """Simulate one scenario with one seed (or run it on a real cluster with --cluster)."""
    from sim.internet import is_internet

    if is_internet(scenario):
        _run_internet(scenario, seed, json_out, out, set_ or [], nodes, datasets, dht)
        return
    if dht is not None:
        raise typer.BadParameter("--dht/--no-dht applies to the internet scenario only")
    sizes = {"nodes": nodes, "workload.datasets": datasets}
    try:
        ov = _overrides(set_ or []) | {k: v for k, v in sizes.items() if v is not None}
        sc = load(scenario, ov)
    except ScenarioError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from e
    if cluster:
        if set_:
            raise typer.BadParameter("--set is not supported with --cluster; edit the file")
        from sim.cluster import run_isolated  # starts processes; imported only when asked

        res = run_isolated(scenario, seed)
        outdir = out or Path("sim-results") / f"{sc.name}-cluster-seed{res['seed']}"
        outdir.mkdir(parents=True, exist_ok=True)
        (outdir / "cluster.json").write_text(json.dumps(res, indent=2, sort_keys=True) + "\n")
        if plot:
            from sim import plots  # matplotlib is slow to import: only when plotting

            plots.cluster_cdf(res, outdir / "cluster_cdf.png")
        typer.echo(json.dumps(res, sort_keys=True) if json_out else json.dumps(res, indent=2))
        return
    res = simulate(sc, seed)
    outdir = out or Path("sim-results") / f"{sc.name}-seed{res['seed']}"
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / "results.json").write_text(json.dumps(res, indent=2, sort_keys=True) + "\n")
    if plot:
        from sim import plots

        plots.latency_cdf([res], outdir / "latency_cdf.png", f"{sc.name}, seed {res['seed']}")
    if json_out:
        typer.echo(json.dumps(res, sort_keys=True))
    else:
        lat = res["latency_ms"] or {}
        typer.echo(
            f"{sc.name} seed={res['seed']} nodes={res['nodes']} heads={res['heads']} "
            f"delivery={res['delivery_ratio']} p50={lat.get('p50')}ms p99={lat.get('p99')}ms "
            f"P(bad)={res['bad_accept_probability']} wall={res['wall_s']}s -> {outdir}"
        )


def _run_internet(
    scenario: str,
    seed: int | None,
    json_out: bool,
    out: Path | None,
    set_: list[str],
    nodes: int | None,
    datasets: int | None,
    dht: bool | None,
) -> None:
    """``sim run`` of an ``internet`` scenario (``sim/internet.py``)."""
    from sim.internet import load_params, simulate_internet

    given = {"seed": seed, "internet.nodes": nodes, "internet.datasets": datasets}
    given["internet.dht"] = dht
    try:
        params = load_params(
            scenario, _overrides(set_) | {k: v for k, v in given.items() if v is not None}
        )
    except ScenarioError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from e
    res = simulate_internet(params)
    outdir = out or Path("sim-results") / f"internet-n{params.nodes}-seed{params.seed}"
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / "results.json").write_text(json.dumps(res, indent=2, sort_keys=True) + "\n")
    typer.echo(json.dumps(res, sort_keys=True) if json_out else json.dumps(res, indent=2))


@sim_app.command("sweep")
def sweep_cmd(
    scenario: Annotated[str, typer.Argument(help="scenario file or name in sim/scenarios/")],
    param: Annotated[
        list[str] | None,
        typer.Option(help="grid axis key=v1,v2,... (repeatable)"),
    ] = None,
    seeds: Annotated[str, typer.Option(help="comma-separated seeds")] = "1",
    out: Annotated[Path | None, typer.Option(help="output directory")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="print the sweep JSON")] = False,
) -> None:
    """Run a parameter grid (the cartesian product of every --param) for each seed."""
    axes: list[tuple[str, list[Any]]] = []
    for p in param or []:
        key, sep, values = p.partition("=")
        if not sep:
            raise typer.BadParameter(f"expected key=v1,v2, got {p!r}")
        axes.append((key.strip(), [parse_value(v.strip()) for v in values.split(",")]))
    rows: list[dict[str, Any]] = []
    for combo in itertools.product(*(vals for _, vals in axes)):
        ov = {k: v for (k, _), v in zip(axes, combo, strict=True)}
        try:
            sc = load(scenario, ov)
        except ScenarioError as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(2) from e
        for s in seeds.split(","):
            res = simulate(sc, int(s))
            res["params"] = ov
            res["label"] = ", ".join(f"{k}={v}" for k, v in ov.items())
            rows.append(res)
            if not json_out:
                typer.echo(
                    f"{res['label']} seed={s}: P(bad)={res['bad_accept_probability']} "
                    f"detect={res['fraud_detection_s']} engine/head="
                    f"{res['engine_s_per_trusted_head']} wall={res['wall_s']}s"
                )
    outdir = out or Path("sim-results") / f"sweep-{Path(scenario).stem}"
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / "sweep.json").write_text(json.dumps(rows, indent=2, sort_keys=True) + "\n")
    from sim import plots  # matplotlib is slow to import: only when plotting

    plots.detection_vs_malicious(rows, outdir / "detection_vs_malicious.png")
    plots.cost_vs_safety(rows, outdir / "cost_vs_safety.png")
    plots.latency_cdf(rows, outdir / "latency_cdf.png")
    if json_out:
        typer.echo(json.dumps(rows, sort_keys=True))


def _csv(text: str, kind: type) -> list[Any]:
    try:
        return [kind(v.strip()) for v in text.split(",") if v.strip()]
    except ValueError as e:
        what = f"comma-separated {kind.__name__} values"
        raise typer.BadParameter(f"expected {what}: {text!r}") from e


@sim_app.command("spark-sweep")
def spark_sweep_cmd(
    scenario: Annotated[str, typer.Option(help="base scenario (file or name)")] = "sweep",
    master: Annotated[
        str, typer.Option(help="Spark master: local[*], local[N] or spark://host:7077")
    ] = "local[*]",
    policies: Annotated[str, typer.Option(help="comma-separated policies")] = (
        "verify-all,quorum,sample,reputation"
    ),
    malicious: Annotated[str, typer.Option(help="comma-separated malicious fractions")] = "0.1,0.3",
    inside: Annotated[
        str, typer.Option(help="comma-separated counts of colluders inside the trusted set")
    ] = "0,2,3",
    seeds: Annotated[int, typer.Option(help="seeds 1..N per cell (>= 10 for the CIs)")] = 10,
    out: Annotated[Path | None, typer.Option(help="output directory")] = None,
    plot: Annotated[bool, typer.Option(help="write policy_sweep.png")] = True,
) -> None:
    """Run the trust-policy grid as Spark jobs, one simulation per task; print the table."""
    from sim import spark_sweep

    try:
        grid = spark_sweep.tasks(
            scenario,
            _csv(policies, str),
            _csv(malicious, float),
            _csv(inside, int),
            range(1, seeds + 1),
        )
    except ScenarioError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from e
    rows = spark_sweep.run_on_spark(grid, master)
    outdir = out or Path("sim-results") / "spark-sweep"
    summary = spark_sweep.write(rows, outdir, plot)
    typer.echo(spark_sweep.markdown(summary), nl=False)
    typer.echo(f"{len(rows)} simulations on {master} -> {outdir}")


@sim_app.command("discovery")
def discovery_cmd(
    nodes: Annotated[int, typer.Option(min=2, help="nodes in the network")] = 10_000,
    datasets: Annotated[int, typer.Option(min=1, help="datasets (Zipf popularity)")] = 10_000,
    carriers: Annotated[int, typer.Option(min=1, help="carriers per dataset")] = 5,
    subscriptions: Annotated[int, typer.Option(min=1, help="subscriptions measured")] = 2_000,
    unresponsive: Annotated[
        float, typer.Option(min=0.0, max=0.9, help="fraction of nodes that never answer")
    ] = 0.10,
    seed: Annotated[int, typer.Option(help="random seed (the run is deterministic per seed)")] = 1,
    json_out: Annotated[bool, typer.Option("--json", help="print the results JSON")] = False,
) -> None:
    """Provider discovery over the DHT (p2p/dht) against the one-hop exchange (sim/discovery.py)."""
    from sim.discovery import DiscoveryParams, simulate_discovery

    if carriers > nodes:
        raise typer.BadParameter(f"--carriers {carriers} is more than --nodes {nodes}")
    res = simulate_discovery(
        DiscoveryParams(
            nodes=nodes,
            datasets=datasets,
            carriers=carriers,
            subscriptions=subscriptions,
            unresponsive=unresponsive,
            seed=seed,
        )
    )
    typer.echo(json.dumps(res, sort_keys=True) if json_out else json.dumps(res, indent=2))
