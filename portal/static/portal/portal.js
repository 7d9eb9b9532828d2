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

// The top bar's Menu button: on a phone (portal.css) the navigation and the account fold behind it. Without this
// script the button stays hidden and the bar shows everything.
document.querySelectorAll("[data-menu-toggle]").forEach((button) => {
  const bar = button.closest(".topbar");
  if (!bar) return;
  const show = (open) => {
    button.setAttribute("aria-expanded", String(open));
    bar.classList.toggle("is-open", open);
  };
  bar.classList.add("has-menu");
  button.addEventListener("click", () => show(button.getAttribute("aria-expanded") !== "true"));
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && bar.classList.contains("is-open")) {
      show(false);
      button.focus();
    }
  });
});

// A list's filters fold away on a phone (its rows come first) unless a filter is in use; open without this script.
if (window.matchMedia("(max-width: 640px)").matches) {
  document.querySelectorAll("details.fold-on-phone:not([data-active])").forEach((fold) => { fold.open = false; });
}

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

// The job form's distributed-training fields show only while the kind is distributed (progressive disclosure:
// without this script they are always shown, and the server checks them either way). A section holding a
// problem stays visible.
document.querySelectorAll("[data-show-for-kind]").forEach((section) => {
  const kindSelect = document.getElementById(section.dataset.kindSelect);
  if (!kindSelect) return;
  const apply = () => {
    section.hidden = kindSelect.value !== section.dataset.showForKind && !section.querySelector(".has-error");
  };
  kindSelect.addEventListener("change", apply);
  apply();
});

// The carve form shows only the fieldset of the change picked with its "What to change" radios (ux-walk A8);
// without this script both are shown and the server reads the one the radio names.
document.querySelectorAll("form[data-kind-switch]").forEach((form) => {
  const apply = () => {
    const picked = form.querySelector("input[name=kind]:checked");
    form.querySelectorAll("fieldset[data-kind]").forEach((fieldset) => {
      fieldset.hidden = Boolean(picked) && fieldset.dataset.kind !== picked.value;
    });
  };
  form.querySelectorAll("input[name=kind]").forEach((radio) => radio.addEventListener("change", apply));
  apply();
});

// The cluster form shows only the fields of the way to reach the cluster picked with its "How the portal reaches it"
// radios; without this script all are shown, and the server reads those of the way picked. After a refused answer
// the way submitted is the one picked, so every field with a problem is in view.
document.querySelectorAll("form[data-connection-fields]").forEach((form) => {
  const fieldsOf = JSON.parse(form.dataset.connectionFields);
  const all = new Set(Object.values(fieldsOf).flat());
  const apply = () => {
    const picked = form.querySelector("input[name=connection]:checked");
    const shown = new Set(picked ? fieldsOf[picked.value] || [] : all);
    all.forEach((name) => {
      const field = form.querySelector(`.field[data-field="${name}"]`);
      if (field) field.hidden = !shown.has(name);
    });
  };
  form.querySelectorAll("input[name=connection]").forEach((radio) => radio.addEventListener("change", apply));
  apply();
});

// The carve form's per-GPU fields show what the preset picked puts on every GPU, read-only while a preset is
// picked (the server applies the preset, not the fields); "Custom" makes them editable again, starting from the
// last preset's layout (ux-walk 2: they kept showing the old layout). Without this script the server fills them
// in when the form comes back.
document.querySelectorAll("select[data-preset-layouts]").forEach((select) => {
  const layouts = JSON.parse(select.dataset.presetLayouts);
  const fields = select.form.querySelectorAll("input[name^=gpu_]");
  const apply = () => {
    const text = layouts[select.value];
    fields.forEach((field) => {
      if (text !== undefined) field.value = text;
      field.readOnly = text !== undefined;
    });
  };
  select.addEventListener("change", apply);
  apply();
});

// The job form says a class's caveats (time-sliced or MPS sharing, architecture, GKE's MPS pools) only for the
// class picked (ux-walk R9); without this script every offered class's caveats are listed.
const caveatClassSelect = document.querySelector("select[name=resource_class]");
if (caveatClassSelect && document.querySelector("[data-caveat-for]")) {
  const showCaveats = () => {
    document.querySelectorAll("[data-caveat-for]").forEach((note) => {
      note.hidden = note.dataset.caveatFor !== caveatClassSelect.value;
    });
  };
  caveatClassSelect.addEventListener("change", showCaveats);
  showCaveats();
}

// The volume rows of the job and notebook forms: "Add a volume" copies the last row, empty and without its
// problems, with the next index (the read-only checkbox sends its row's index). Without this script the form
// shows its blank rows only.
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
    row.classList.remove("has-error");
    row.querySelectorAll(".errorlist").forEach((list) => list.remove());
    row.querySelectorAll("input").forEach((input) => {
      input.removeAttribute("aria-invalid");
      input.removeAttribute("aria-describedby");
    });
    last.after(row);
    row.querySelector("input").focus();
  });
}
// The volume rows suggest the team's volumes and datasets on the clusters the work may go to (jobs.forms.volume_choices,
// the rule admission places work by). When the team, the clusters, a claim or the secrets change, the page asks the
// server for the suggestions again and puts them in place. Without this script they are those of the choices the
// page was loaded (or sent back) with; the server checks every submission either way.
document.querySelectorAll("[data-volume-choices]").forEach((box) => {
  const form = box.closest("form");
  if (!form) return;
  const watched = new Set(["team", "clusters", "volume_claim", "secret_env", "secret_files"]);
  // As the server reads them (jobs.forms.uses_text): a line that is neither blank nor a # comment names a secret.
  const namesSome = (text) => String(text || "").split("\n").some((line) => line.trim() && !line.trim().startsWith("#"));
  let asked = 0;
  let timer = 0;
  const refresh = async () => {
    const data = new FormData(form);
    const query = new URLSearchParams();
    ["team", "clusters", "volume_claim"].forEach((name) => data.getAll(name).forEach((value) => query.append(name, value)));
    if (namesSome(data.get("secret_env")) || namesSome(data.get("secret_files"))) query.set("secrets", "1");
    const mine = ++asked;
    try {
      const response = await fetch(`${box.dataset.volumeChoices}?${query}`, { credentials: "same-origin" });
      const text = await response.text();
      if (response.ok && mine === asked) box.innerHTML = text; // a later answer never gives way to an earlier one
    } catch {
      // Offline or refused: the suggestions stay as they were.
    }
  };
  form.addEventListener("change", (event) => { if (watched.has(event.target.name)) refresh(); });
  form.addEventListener("input", (event) => {
    if (event.target.name !== "clusters") return;
    window.clearTimeout(timer);
    timer = window.setTimeout(refresh, 400);
  });
});

// Live pages: an element with data-live-every="<seconds>" makes the page re-read itself that often and swap in
// the new content of each [data-live="<name>"] region (state badge, timeline, wait reason, countdowns), without
// a reload. A region with data-live-version is swapped only when its version changed (so a log being followed
// is not reset). A region holding a form someone is using (a field has the focus, or was changed and not sent)
// is left as it is, so a poll never takes away what they are typing or choosing; the page's next load shows
// the news. CSRF tokens differ on every render, so regions are compared without them. The page stops polling
// once the fresh page carries no data-live-every (the work is final).
(() => {
  const root = document.querySelector("[data-live-every]");
  if (!root) return;
  document.addEventListener("input", (event) => {
    const form = event.target.closest("[data-live] form");
    if (form) form.dataset.edited = "1";
  });
  document.addEventListener("change", (event) => {
    const form = event.target.closest("[data-live] form");
    if (form) form.dataset.edited = "1";
  });
  const inUse = (region) => {
    const focused = document.activeElement;
    if (focused && region.contains(focused) && focused.matches("form input, form select, form textarea")) return true;
    return region.querySelector("form[data-edited]") !== null;
  };
  const withoutTokens = (element) => {
    const copy = element.cloneNode(true);
    copy.querySelectorAll("input[name=csrfmiddlewaretoken]").forEach((input) => input.removeAttribute("value"));
    return copy.outerHTML;
  };
  const every = Math.max(1, Number(root.dataset.liveEvery) || 3) * 1000;
  const poll = async () => {
    let html;
    try {
      // A page that follows a log stream says so: the server then skips reading the log tail from the cluster.
      const headers = { "X-Live": "1" };
      if (document.querySelector("pre[data-following=open]")) headers["X-Live-Log"] = "following";
      const response = await fetch(window.location.href, { headers, credentials: "same-origin" });
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
      if (inUse(region)) continue;
      if (withoutTokens(region) === withoutTokens(next)) continue;
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
    pre.dataset.following = "open";
    const keep = Number(pre.dataset.followLines) || 200;
    const status = pre.parentElement.querySelector("[data-role=log-status]");
    const say = (text) => { if (status) status.textContent = text; };
    pre.scrollTop = pre.scrollHeight;  // a followed log starts at its newest line
    const source = new EventSource(pre.dataset.followUrl);
    // Lines are put in once a frame: the first batch replaces the tail the page came with (the stream starts
    // with that same tail) in one go, so the panel neither blinks empty nor re-lays out for every line.
    let fresh = true, pending = [], scheduled = false;
    const flush = () => {
      scheduled = false;
      const atBottom = fresh || pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      if (fresh) { pre.textContent = ""; fresh = false; }
      pre.append(...pending.map((line) => line + "\n"));  // a text node a line: the oldest go one by one
      pending = [];
      const before = pre.scrollHeight;
      while (pre.childNodes.length > keep) pre.firstChild.remove();
      if (atBottom) pre.scrollTop = pre.scrollHeight;
      else pre.scrollTop -= before - pre.scrollHeight;  // a reader scrolled up keeps the lines they read in view
    };
    source.onmessage = (event) => {
      pending.push(event.data);
      if (!scheduled) { scheduled = true; window.requestAnimationFrame(flush); }
      const empty = pre.parentElement.querySelector("[data-role=log-empty]");
      if (empty) empty.remove();
      say("");  // lines flow again: a "waiting" word no longer holds
    };
    source.addEventListener("waiting", (event) => say(event.data));
    source.addEventListener("end", (event) => { say(event.data); source.close(); pre.dataset.following = "ended"; });
    // Stop when the region is replaced (the job ended and its kept log is shown instead).
    const watcher = new MutationObserver(() => {
      if (!document.body.contains(pre)) { source.close(); pre.dataset.following = "ended"; watcher.disconnect(); }
    });
    watcher.observe(document.body, { childList: true, subtree: true });
  }
}
startFollowing(document);
