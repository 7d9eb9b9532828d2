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
// Live pages: an element with data-live-every="<seconds>" makes the page re-read itself that often and swap in
// the new content of each [data-live="<name>"] region (state badge, timeline, wait reason, countdowns), without
// a reload. A region with data-live-version is swapped only when its version changed (so a log being followed
// is not reset). The page stops polling once the fresh page carries no data-live-every (the work is final).
(() => {
  const root = document.querySelector("[data-live-every]");
  if (!root) return;
  const every = Math.max(1, Number(root.dataset.liveEvery) || 3) * 1000;
  const poll = async () => {
    let html;
    try {
      const response = await fetch(window.location.href, { headers: { "X-Live": "1" }, credentials: "same-origin" });
      if (!response.ok) return window.setTimeout(poll, every * 2);
      html = await response.text();
    } catch {
      return window.setTimeout(poll, every * 2);  // offline for a moment: try again later
    }
    const fresh = new DOMParser().parseFromString(html, "text/html");
    for (const region of document.querySelectorAll("[data-live]")) {
      const next = fresh.querySelector(`[data-live="${region.dataset.live}"]`);
      if (!next) continue;
      if (region.dataset.liveVersion !== undefined && region.dataset.liveVersion === next.dataset.liveVersion) continue;
      if (region.outerHTML === next.outerHTML) continue;
      const adopted = document.importNode(next, true);
      region.replaceWith(adopted);
      startFollowing(adopted);
    }
    if (fresh.querySelector("[data-live-every]")) window.setTimeout(poll, every);
  };
  window.setTimeout(poll, every);
})();

// A running pod's log follows live: <pre data-follow-url> reads server-sent events (one line each) and keeps the
// last data-follow-lines lines. The browser reconnects by itself after each bounded stream (Last-Event-ID).
function startFollowing(scope) {
  for (const pre of (scope || document).querySelectorAll("pre[data-follow-url]")) {
    if (pre.dataset.following) continue;
    pre.dataset.following = "1";
    const keep = Number(pre.dataset.followLines) || 200;
    const status = pre.parentElement.querySelector("[data-role=log-status]");
    const say = (text) => { if (status) status.textContent = text; };
    const source = new EventSource(pre.dataset.followUrl);
    let fresh = true;
    source.onmessage = (event) => {
      if (fresh) { pre.textContent = ""; fresh = false; }  // the stream starts with the same tail the page had
      const empty = pre.parentElement.querySelector("[data-role=log-empty]");
      if (empty) empty.remove();
      const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      pre.append(event.data + "\n");
      const lines = pre.textContent.split("\n");
      if (lines.length > keep + 1) pre.textContent = lines.slice(-keep - 1).join("\n");
      if (atBottom) pre.scrollTop = pre.scrollHeight;
      say("Following live.");
    };
    source.addEventListener("waiting", (event) => say(event.data));
    source.addEventListener("end", (event) => { say(event.data); source.close(); });
    // Stop when the region is replaced (the job ended and its kept log is shown instead).
    const watcher = new MutationObserver(() => {
      if (!document.body.contains(pre)) { source.close(); watcher.disconnect(); }
    });
    watcher.observe(document.body, { childList: true, subtree: true });
  }
}
startFollowing(document);
