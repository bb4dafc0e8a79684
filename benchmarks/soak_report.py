"""The soak's numbers: lookup statistics from the lookup processes, and the Markdown report."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from benchmarks._common import fmt_bytes
from benchmarks.soak_lookups import LookupReport


def percentile(sorted_values: Sequence[int], p: float) -> int | None:
    """The nearest-rank ``p`` quantile (0 < p <= 1) of ascending values; None when empty."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(p * len(sorted_values)))
    return sorted_values[rank - 1]


def _ms_stats(values_ns: Sequence[int]) -> dict[str, Any]:
    ordered = sorted(values_ns)

    def ms(value: int | None) -> float | None:
        return None if value is None else round(value / 1e6, 3)

    return {"count": len(ordered), "p50_ms": ms(percentile(ordered, 0.5)),
            "p99_ms": ms(percentile(ordered, 0.99)), "max_ms": ms(ordered[-1] if ordered else None)}


def summarize_lookups(reports: list[LookupReport]) -> dict[str, Any]:
    """Totals over the lookup processes' last reports, and the swap-pause statistics."""
    lookups = sum(r.lookups for r in reports)
    busy = sum(r.busy_ns for r in reports)
    return {
        "processes": len(reports),
        "lookups": lookups,
        "exceptions": sum(r.exceptions for r in reports),
        "false_negatives": sum(r.false_negatives for r in reports),
        "jump_misses": sum(r.jump_misses for r in reports),
        "swaps_seen": sum(r.swaps for r in reports),
        "mean_lookup_ns": round(busy / lookups, 1) if lookups else None,
        "swap_pause": _ms_stats([p for r in reports for p in r.swap_pauses_ns]),
        "swap_cpu": _ms_stats([c for r in reports for c in r.swap_cpu_ns]),
        "baseline_gap": _ms_stats([g for r in reports for g in r.baseline_gaps_ns]),
        "workers": [{
            "worker": r.worker, "pid": r.pid, "final": r.final, "fatal": r.fatal,
            "data_dirs": len(r.data_dirs), "lookups": r.lookups, "batches": r.batches,
            "exceptions": r.exceptions, "false_negatives": r.false_negatives,
            "jump_misses": r.jump_misses, "swaps": r.swaps,
            "versions_seen": {d.rsplit("/", 2)[-2]: v for d, v in r.versions_seen.items()},
            "samples": r.samples,
        } for r in sorted(reports, key=lambda r: r.worker)],
    }


def _mib(value: float | None) -> str:
    return "n/a" if value is None else f"{value / 1024 / 1024:.1f}"


def _deltas_setting(cfg: dict[str, Any]) -> str:
    if not cfg.get("deltas", False):
        return "**off** (the agents' `install.deltas = false`: every version in full)"
    return ("**on** (the agents' default `install.deltas = true`); every version holds the same "
            "number of keys, so the publisher keeps the filter's parameters and makes a delta from "
            "each of the newest versions (up to its default `deltas.max_bases = 8`)")


def _ways(counts: dict[str, int]) -> str:
    return ", ".join(f"{way} {n}" for way, n in counts.items() if n) or "none"


def _reasons(fallbacks: dict[str, int]) -> str:
    return ", ".join(f"{reason} {n}" for reason, n in fallbacks.items()) or "none"


def _swarm_settings_line(settings: dict[str, Any]) -> str:
    """What the agents' ``[swarm]`` timings were: the defaults, or the ones set."""
    if not settings:
        return ("- The agents' swarm timings: the agent's defaults (only the fleet's addresses "
                "and loopback settings are set).")
    return ("- The agents' swarm timings beside the fleet's loopback settings: "
            + ", ".join(f"`{k} = {v}`" for k, v in settings.items()) + ".")


def render_deltas(result: dict[str, Any]) -> list[str]:
    """The report's "Deltas" section: delta sizes, installs by way, fallbacks, catch-ups
    (empty for results without delta counts)."""
    totals = result.get("deltas")
    if totals is None:
        return []
    versions = result["versions"]
    shares = sorted(d["size"] / v["size"] for v in versions[1:] for d in v.get("deltas", [])
                    if d["base"] == v["version"] - 1)
    out = ["", "## Deltas", ""]
    if shares:
        out.append(f"- Delta from the previous version: {len(shares)} of {len(versions) - 1} versions "
                   f"after v1, {shares[0]:.1%} to {shares[-1]:.1%} of the file (median "
                   f"{shares[len(shares) // 2]:.1%}); bases per version: "
                   f"{max(len(v.get('deltas', [])) for v in versions[1:])} at most.")
    origin = result.get("origin") or {}
    if origin.get("filter_requests"):
        out.append(f"- Origin payload egress (filter files and deltas, the web seed's body bytes): "
                   f"{fmt_bytes(origin['filter_bytes'])} in {origin['filter_requests']:,} requests, "
                   f"{origin['filter_bytes'] / versions[-1]['size']:.1f} files' worth.")
    share = totals["delta_share"]
    out += [
        f"- Installs (downloaded versions, from the agents' logs across restarts): "
        f"**{totals['installs_by_delta']} by delta**, **{totals['installs_in_full']} in full**"
        + (f" ({share:.1%} by delta)." if share is not None else "."),
        f"- Delta fallbacks to the full file, by reason: {_reasons(totals['fallbacks'])}.",
        f"- Catch-ups of restarted agents (each restarted process's first swap): "
        f"{_ways(totals['catch_up_ways'])}. (`installed`: a version already on disk; "
        "`none`: no swap before the process or the run ended: already on the latest version, "
        "or killed again first.)", "",
        "| agent | installs by delta | in full | fallbacks | catch-ups (process: way vN from vB) |",
        "|---|---|---|---|---|",
    ]
    for agent in result["agents"]:
        d = agent["deltas"]
        ups = "; ".join(
            f"#{c['process']}: {c['way']}"
            + (f" v{c['version']}" if c["version"] is not None else "")
            + (f" from v{c['delta_from']}" if c["delta_from"] is not None else "")
            + (f" after fallback ({', '.join(c['fallbacks'])})" if c["fallbacks"] else "")
            for c in d["catch_ups"]) or "no restart"
        out.append(f"| {agent['name']} | {d['installs_by_delta']} | {d['installs_in_full']} | "
                   f"{_reasons(d['fallbacks'])} | {ups} |")
    return out


def render_markdown(result: dict[str, Any]) -> str:
    """The report of one soak run (docs/benchmarks/soak.md)."""
    cfg, look, machine = result["config"], result["lookups"], result["machine"]
    out = ["# Churn and soak", ""]
    out += [f"Generated by `{result['command']}` on {machine['date']} "
            f"({machine['nproc']} CPUs, {machine['cpu_model']}, Python {machine['python']}; "
            f"load average at the end {result['load_average_end']}). "
            f"Verdict: **{'PASS' if result['passed'] else 'FAIL'}**.", ""]
    origin, keys = result["origin"] or {}, result["keys"]
    out += [
        "## What ran", "",
        f"- {cfg['agents']} agents (`bloomswarm agent run` processes, discovery: {result['discovery']}), "
        f"keep_versions = {cfg['keep_versions']}; one phase of {result['soak_seconds']:.0f} s after the "
        f"warm-up (v1 on every agent), {result['wall_seconds']:.0f} s wall clock in all.",
        f"- A new version every {cfg['publish_interval']:g} s: {len(result['versions'])} versions of "
        f"{keys['per_version']:,} keys ({keys['stable']:,} stable, a window of "
        f"{keys['rolling_window']:,} rolling keys sliding by {keys['churn_per_version']:,} "
        f"per version), {fmt_bytes(result['bounds']['max_file_size'])} per file.",
        f"- Every {cfg['kill_interval']:g} s a random agent killed with SIGKILL and started again: "
        f"{sum(len(a['kills']) for a in result['agents'])} kills.",
        f"- The origin proxy failed {cfg['fault_rate']:.0%} of the agents' origin requests throughout "
        f"(half 503, half a 5 s stall then a dropped connection): {origin.get('faults', 0):,} of "
        f"{origin.get('requests', 0):,} requests ({(origin.get('fault_share') or 0):.1%}) failed.",
        _swarm_settings_line(result["swarm_settings"]),
        f"- The agents' S3 client: `read_timeout_s = {cfg.get('s3_read_timeout', 30.0)}`, "
        f"`max_attempts = {cfg.get('s3_attempts', 3)}` (documents are small: a stalled GET is given up "
        "and retried quickly rather than waited on).",
        f"- Deltas: {_deltas_setting(cfg)}.",
        f"- {look['processes']} lookup processes (spawn, nice {cfg['lookup_nice']}), each following half "
        "of the agents' data directories through `LiveFilter`, looking up keys common to the serving "
        "version and the next one, continuously.", "",
        "## Acceptance checks", "", "| check | value | target | result |", "|---|---|---|---|",
    ]
    for check in result["checks"]:
        note = f" ({check['note']})" if check["note"] else ""
        out.append(f"| {check['name']}{note} | {check['value']:g} | {check['op']} {check['target']:g} | "
                   f"{check['status']} |")
    pause, base, cpu = look["swap_pause"], look["baseline_gap"], look["swap_cpu"]
    out += [
        "", "## Lookups", "",
        f"- lookups done: **{look['lookups']:,}** (mean {look['mean_lookup_ns']} ns each, timing included)",
        f"- lookup exceptions: **{look['exceptions']}**",
        f"- false negatives against keys common to consecutive versions: **{look['false_negatives']}**",
        f"- misses of keys the next-but-one version no longer holds (an agent jumped a version under a "
        f"batch; not false negatives): {look['jump_misses']}",
        f"- swaps seen by the lookup processes: {look['swaps_seen']}",
        f"- **swap pause**: max **{pause['max_ms']} ms**, p99 **{pause['p99_ms']} ms**, p50 "
        f"{pause['p50_ms']} ms over {pause['count']} swaps",
        f"- the same statistic in batches without a swap (baseline: scheduling on a shared machine): "
        f"max {base['max_ms']} ms, p99 {base['p99_ms']} ms, p50 {base['p50_ms']} ms over "
        f"{base['count']:,} batches",
        f"- **swap CPU** (CPU time of the lookup process's other threads during a swap's batches; not "
        f"inflated by preemption): max **{cpu['max_ms']} ms**, p99 **{cpu['p99_ms']} ms**, p50 "
        f"{cpu['p50_ms']} ms", "",
        "The **swap pause** of a swap is the longest gap between two consecutive completed lookups "
        "(each timed with `time.perf_counter_ns`) in the batch of "
        f"{cfg['batch']} lookups during which the lookup process's LiveFilter swapped versions, and in the "
        "batch before it. LiveFilter swaps in a background thread (watchdog event or stat poll), so "
        "whatever a swap costs the lookup thread (the GIL held while the new file is mapped and its "
        "header checked) shows up as such a gap; so does the scheduler preempting the process, which the "
        "baseline row measures. The swap CPU is the process's CPU time minus the lookup thread's over the "
        "same two batches: the work the swap did beside the lookups, which is the most it can have held "
        "the GIL, whatever the load on the machine.", "",
        "## Agents", "",
        "Skipped: published versions the agent never swapped to (its log, and `current` as sampled every "
        "second). A skip is excused when the agent was down (from its kill until it answered /healthz) "
        "at some moment while that version was the latest. RSS and FDs: the first sample after "
        f"{cfg['warmup']:g} s into the soak and the last, after the final convergence; the bound applies "
        "to the same process start to end, and a restarted agent is held to the largest start sample. "
        "Disk: allocated bytes of the data directory, peak over 1 s samples (bound "
        f"{fmt_bytes(result['bounds']['disk_bytes'])} = (keep_versions + 1) files + 1 MiB), and the "
        "versions / staging entries at the end.", "",
        "| agent | kills | skipped (excused) | RSS MiB start → end | FDs (files) start → end | disk peak | "
        "versions, staging at end | ok |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for agent in result["agents"]:
        skipped = ", ".join(f"v{s['version']}{'' if s['excused'] else ' (NOT excused)'}"
                            for s in agent["skipped"]) or "none"
        start, end = agent["start"] or {}, agent["end"] or {}
        restarted = "" if agent["same_process_start_to_end"] else " (restarted)"
        peak, disk_end = agent["disk_peak"] or {}, agent["disk_end"] or {}
        ok = agent["converged"] and agent["rss_ok"] and agent["fds_ok"] and agent["disk_ok"] and not any(
            not s["excused"] for s in agent["skipped"])
        out.append(
            f"| {agent['name']} | {len(agent['kills'])} | {skipped} | {_mib(start.get('rss'))} → "
            f"{_mib(end.get('rss'))}{restarted} | {start.get('fds', 'n/a')} ({start.get('files', 'n/a')}) → "
            f"{end.get('fds', 'n/a')} ({end.get('files', 'n/a')}) | "
            f"{fmt_bytes(peak.get('bytes', 0))} | {disk_end.get('versions', 'n/a')}, "
            f"{disk_end.get('staging', 'n/a')} | {'yes' if ok else 'NO'} |")
    delay = result.get("swap_delay_s") or {}
    if delay.get("count"):
        out += ["", f"Swap delay (a version's announcement to an agent's swap, from the agents' logs, "
                f"{delay['count']} swaps): p50 {delay['p50']:.1f} s, p90 {delay['p90']:.1f} s, "
                f"max {delay['max']:.1f} s."]
    seen = result.get("announcement_seen_after_s") or {}
    if seen.get("count"):
        poll = result["poll_interval_s"]
        out += ["", f"Announcement seen (latest.json moved to a version → the agent's poll returned it, "
                f"{seen['count']} agent-versions, the agent up; polls run every {poll:g}–{1.5 * poll:g} s, "
                f"so anything longer is time the agent's loop spent "
                f"blocked in polls that hit origin faults): p50 "
                f"{seen['p50']:.1f} s, p90 {seen['p90']:.1f} s, max {seen['max']:.1f} s."]
    out += render_deltas(result)
    errors: dict[str, int] = {}
    for agent in result["agents"]:
        for event, count in agent["log_errors"].items():
            errors[event] = errors.get(event, 0) + count
    out += ["", "Warnings and errors the agents logged (all agents, by event): "
            + (", ".join(f"{k} {v}" for k, v in sorted(errors.items())) or "none") + "."]
    internal = [line for agent in result["agents"] for line in agent["internal_errors"]]
    out += ["", f"Internal errors (agent bugs) in the logs: {len(internal)}."]
    if result.get("aborted"):
        out += ["", f"**The run was aborted:** `{result['aborted'].splitlines()[0]}`"]
    if result.get("convergence_error"):
        out += ["", f"**Convergence:** {result['convergence_error']}"]
    out += ["", "Raw numbers, including every agent's RSS/FD timeline, kills and swap list: "
            "[soak.json](soak.json).", ""]
    return "\n".join(out)


__all__ = ["percentile", "render_deltas", "render_markdown", "summarize_lookups"]
