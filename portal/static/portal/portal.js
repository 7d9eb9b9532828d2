// Progressive enhancement only: every page works without this file.
// Buttons with data-copy-target="<element id>" copy that element's text to the clipboard.
document.addEventListener("click", async (event) => {
  const button = event.target.closest("[data-copy-target]");
  if (!button) return;
  const source = document.getElementById(button.dataset.copyTarget);
  if (!source) return;
  const status = document.getElementById(button.dataset.copyStatus || "");
  const say = (text) => { if (status) status.textContent = text; };
  try {
    await navigator.clipboard.writeText(source.textContent.trim());
    say("Copied to the clipboard.");
  } catch {
    // Clipboard access can be refused (insecure origin, permissions): select the text so Ctrl+C works.
    const range = document.createRange();
    range.selectNodeContents(source);
    const selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
    say("Selected: press Ctrl+C (⌘C on a Mac) to copy.");
  }
});

// Copy buttons are hidden until this script runs, since they do nothing without it.
document.querySelectorAll("[data-copy-target][hidden]").forEach((button) => { button.hidden = false; });

// Ask before destructive actions: a form or a submit button with data-confirm="question".
document.addEventListener("submit", (event) => {
  const button = event.submitter;
  const question = (button && button.dataset.confirm) || event.target.dataset.confirm;
  if (question && !window.confirm(question)) {
    event.preventDefault();
  }
});

// The job form offers only the resource classes the chosen team has quota for (options carry data-teams).
document.querySelectorAll("select[data-team-filter]").forEach((teamSelect) => {
  const classSelect = document.getElementById(teamSelect.dataset.teamFilter);
  if (!classSelect) return;
  const teamSlugs = Object.fromEntries([...teamSelect.options].map((o) => [o.value, o.dataset.slug]));
  const apply = () => {
    const slug = teamSlugs[teamSelect.value];
    let firstShown = null;
    for (const option of classSelect.options) {
      const offered = (option.dataset.teams || "").split(" ").includes(slug);
      option.hidden = option.disabled = !offered;
      if (offered && !firstShown) firstShown = option;
    }
    if (classSelect.selectedOptions[0]?.disabled && firstShown) firstShown.selected = true;
  };
  teamSelect.addEventListener("change", apply);
  apply();
});

// The job form's volume rows: "Add a volume" copies the last row, empty, with the next index (the read-only
// checkbox sends its row's index). Without this script the form shows two rows.
const addVolumeRow = document.getElementById("add-volume-row");
if (addVolumeRow) {
  addVolumeRow.hidden = false;
  addVolumeRow.addEventListener("click", () => {
    const rows = document.querySelectorAll("[data-volume-row]");
    const last = rows[rows.length - 1];
    const index = rows.length;
    const row = last.cloneNode(true);
    row.querySelectorAll("input").forEach((input) => {
      const base = input.id.replace(/-\d+$/, "");
      input.id = `${base}-${index}`;
      if (input.type === "checkbox") { input.checked = false; input.value = String(index); } else { input.value = ""; }
    });
    row.querySelectorAll("label").forEach((label) => { label.htmlFor = label.htmlFor.replace(/-\d+$/, `-${index}`); });
    last.after(row);
    row.querySelector("input").focus();
  });
}
