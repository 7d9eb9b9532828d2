"""A run's results as CSV: one row per scenario × (total | team | class | cluster), the same metric columns on each
(the API's results.csv and the page's export link; a cluster row, present when the replay held several, leaves
blank the metrics it does not have). Cells a spreadsheet would read as a formula are quoted
(accounts.views_audit.csv_safe)."""

from __future__ import annotations

import csv

from accounts.views_audit import csv_safe

METRICS = [
    "jobs",
    "ran",
    "never_ran",
    "wait_p50_s",
    "wait_p95_s",
    "gpu_hours",
    "allocation_mean",
    "capacity_gpus",
    "stranded_gpu_hours",
]
COLUMNS = ["scenario", "origin", "scope", "id", "name", *METRICS]


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4f}".rstrip("0").rstrip(".")  # plain decimals, never 1.9e+06
    return csv_safe(value)


def rows(results: dict) -> list[list[str]]:
    out = []
    for scenario in results.get("scenarios", []):
        head = [csv_safe(scenario.get("name", "")), scenario.get("origin", "")]
        out.append([*head, "total", "", "", *(_cell(scenario.get("totals", {}).get(m)) for m in METRICS)])
        for team in scenario.get("teams", []):
            out.append(
                [
                    *head,
                    "team",
                    str(team.get("team", "")),
                    csv_safe(team.get("name", "")),
                    *(_cell(team.get(m)) for m in METRICS),
                ]
            )
        for klass in scenario.get("classes", []):
            out.append(
                [
                    *head,
                    "class",
                    str(klass.get("class", "")),
                    csv_safe(klass.get("name", "")),
                    *(_cell(klass.get(m)) for m in METRICS),
                ]
            )
        clusters = scenario.get("clusters", [])
        for where in clusters if len(clusters) > 1 else []:
            name = csv_safe(where.get("cluster", ""))
            out.append([*head, "cluster", name, name, *(_cell(where.get(m)) for m in METRICS)])
    return out


def write_csv(out, results: dict) -> None:
    writer = csv.writer(out)
    writer.writerow(COLUMNS)
    writer.writerows(rows(results))
