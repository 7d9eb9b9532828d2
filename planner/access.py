"""Who may use the planner, and what a reader sees of a run's results: one rule, used by the pages and the API.

- Admins see every run and make and cancel runs.
- Team leads (Membership role "lead") read runs: the cluster-wide figures (totals, classes, series, the fidelity
  check) and, of the per-team figures and the never-ran list, only the rows of the teams they lead.
- Everybody else has no planner: the API answers 403, the pages 404.
"""

from __future__ import annotations

from accounts.roles import is_admin, led_team_ids


def can_read(user) -> bool:
    """Admins and team leads."""
    return is_admin(user) or bool(led_team_ids(user))


def can_run(user) -> bool:
    """Make and cancel runs: admins only."""
    return is_admin(user)


def results_for(user, results: dict | None) -> dict | None:
    """The results as ``user`` may see them: whole for admins; for a lead, each scenario's ``teams`` and
    ``never_ran`` cut down to the teams they lead (totals, classes, series and fidelity are cluster-wide and
    stay). A copy: the stored results are never changed."""
    if results is None or is_admin(user):
        return results
    teams = led_team_ids(user)
    scenarios = []
    for scenario in results.get("scenarios", []):
        scenario = dict(scenario)
        scenario["teams"] = [row for row in scenario.get("teams", []) if row.get("team") in teams]
        scenario["never_ran"] = [row for row in scenario.get("never_ran", []) if row.get("team") in teams]
        scenarios.append(scenario)
    return {**results, "scenarios": scenarios}
