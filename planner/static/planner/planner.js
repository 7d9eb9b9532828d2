// The planner's pages. Progressive enhancement only: without this file the form shows every field of every
// change row and every proposal, and the run page reloads itself while the run is in progress.

// New-run form: each change row shows the fields of the type picked; empty proposals and change rows past the
// first are hidden behind "Add a proposal" / "Add a change"; the dates show only for "Between dates".
(() => {
  const form = document.querySelector("form[data-plan-form]");
  if (!form) return;
  const hasValue = (scope) => [...scope.querySelectorAll("input, select, textarea")].some((el) => {
    if (el.type === "checkbox" || el.type === "radio") return false;
    if (el.tagName === "SELECT") return [...el.selectedOptions].some((o) => o.value !== "");
    return el.value.trim() !== "";
  });
  form.querySelectorAll("[data-change-row]").forEach((row) => {
    const type = row.querySelector("select[name$='-type']");
    const apply = () => {
      row.querySelectorAll("[data-for-types]").forEach((group) => {
        group.hidden = !group.dataset.forTypes.split(" ").includes(type.value) && !group.querySelector(".has-error");
      });
    };
    type.addEventListener("change", apply);
    apply();
  });
  form.querySelectorAll("[data-proposal]").forEach((proposal, index) => {
    const rows = [...proposal.querySelectorAll("[data-change-row]")];
    rows.forEach((row, i) => { row.hidden = i > 0 && !hasValue(row) && !row.classList.contains("has-error"); });
    const addChange = proposal.querySelector("[data-add-change]");
    const refresh = () => { addChange.hidden = !rows.some((row) => row.hidden); };
    addChange.addEventListener("click", () => {
      const next = rows.find((row) => row.hidden);
      if (next) { next.hidden = false; next.querySelector("select").focus(); }
      refresh();
    });
    refresh();
    proposal.hidden = index > 0 && !hasValue(proposal) && !proposal.classList.contains("has-error");
  });
  const proposals = [...form.querySelectorAll("[data-proposal]")];
  const addProposal = form.querySelector("[data-add-proposal]");
  const refreshProposals = () => { addProposal.hidden = !proposals.some((p) => p.hidden); };
  addProposal.addEventListener("click", () => {
    const next = proposals.find((p) => p.hidden);
    if (next) { next.hidden = false; next.querySelector("input").focus(); }
    refreshProposals();
  });
  refreshProposals();
  const dates = form.querySelector("[data-dates]");
  const showDates = () => {
    const picked = form.querySelector("input[name='w-range']:checked");
    dates.hidden = (!picked || picked.value !== "dates") && !dates.querySelector(".has-error");
  };
  form.querySelectorAll("input[name='w-range']").forEach((radio) => radio.addEventListener("change", showDates));
  showDates();
})();

// Run page: while the run is queued or running, read it from the API every second and a half, move the progress
// bar and say what the replay is doing; once it has ended, load the page again to show the results.
(() => {
  const box = document.querySelector("[data-plan-progress]");
  if (!box) return;
  const bar = box.querySelector("progress");
  const text = box.querySelector("[data-role=progress-message]");
  const percent = box.querySelector("[data-role=progress-percent]");
  const poll = async () => {
    try {
      const response = await fetch(box.dataset.planProgress, { headers: { Accept: "application/json" }, credentials: "same-origin" });
      if (response.ok) {
        const run = await response.json();
        bar.value = run.progress;
        percent.textContent = `${Math.round(run.progress * 100)}%`;
        text.textContent = run.message || run.state_display;
        if (run.state !== box.dataset.state && !["queued", "running"].includes(run.state)) {
          window.location.reload();
          return;
        }
      }
    } catch { /* offline for a moment: the next poll tries again */ }
    window.setTimeout(poll, 1500);
  };
  window.setTimeout(poll, 1000);
})();
