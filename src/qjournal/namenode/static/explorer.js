// "Browse the file system" in the page: the server renders every listing as plain HTML (the page works
// without JavaScript); this script only makes it quicker to use. Directory links, the breadcrumbs, the path
// box and the pager fetch the next listing from WebHDFS (LISTSTATUS_BATCH, the call Hadoop's own UI makes)
// and redraw the table without reloading; the column heads sort the rows shown in the page.
"use strict";
(function () {
  const table = document.getElementById("listing");
  if (!table) return;
  const user = table.dataset.user || "";
  let rows = [];                       // the FileStatus objects of the batch shown
  let state = {path: table.dataset.path, startAfter: table.dataset.startAfter || "",
               sort: table.dataset.sort || "name", order: table.dataset.order || "asc"};

  const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;",
                                                            '"': "&quot;", "'": "&#39;"}[c]));
  function mode(isDir, octal) {
    const p = parseInt(octal, 8);
    let out = isDir ? "d" : "-";
    for (const shift of [6, 3, 0]) {
      const b = (p >> shift) & 7;
      out += (b & 4 ? "r" : "-") + (b & 2 ? "w" : "-") + (b & 1 ? "x" : "-");
    }
    if (p & 0o1000) out = out.slice(0, -1) + (out.endsWith("x") ? "t" : "T");
    return out;
  }
  function human(n) {
    let v = n;
    for (const unit of ["B", "KB", "MB", "GB", "TB", "PB"]) {
      if (v < 1024 || unit === "PB") return unit === "B" ? `${Math.floor(v)} B` : `${v.toFixed(1)} ${unit}`;
      v /= 1024;
    }
  }
  const pad = (n) => String(n).padStart(2, "0");
  function minute(ms) {
    const d = new Date(ms);
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}`;
  }
  const join = (dir, name) => (dir === "/" ? "/" : dir + "/") + name;
  function query(params) {
    const q = new URLSearchParams(params);
    if (user) q.set("user.name", user);
    return q.toString();
  }
  const explorerUrl = (path, startAfter) =>
    "/explorer.html?" + query(startAfter ? {path, startAfter} : {path});
  const webhdfs = (path, op, extra) =>
    "/webhdfs/v1" + path.split("/").map(encodeURIComponent).join("/") + "?" + query({op, ...(extra || {})});

  const KEYS = {
    permission: (s) => [s.type !== "DIRECTORY" ? 1 : 0, parseInt(s.permission, 8)],
    owner: (s) => [s.owner], group: (s) => [s.group], size: (s) => [s.length],
    mtime: (s) => [s.modificationTime], replication: (s) => [s.type === "DIRECTORY" ? 1 : 0, s.replication],
    name: (s) => [s.pathSuffix],
  };
  function compare(a, b) {
    const ka = KEYS[state.sort](a), kb = KEYS[state.sort](b);
    for (let i = 0; i < ka.length; i++) {
      if (ka[i] < kb[i]) return state.order === "asc" ? -1 : 1;
      if (ka[i] > kb[i]) return state.order === "asc" ? 1 : -1;
    }
    return 0;
  }

  function draw(remaining) {
    const body = table.tBodies[0];
    const sorted = rows.slice().sort(compare);
    body.innerHTML = sorted.length ? sorted.map((s) => {
      const isDir = s.type === "DIRECTORY";
      const name = isDir
        ? `<a class="dir" href="${esc(explorerUrl(join(state.path, s.pathSuffix)))}">${esc(s.pathSuffix)}</a>`
        : `<span class="file">${esc(s.pathSuffix)}</span>`;
      return `<tr data-name="${esc(s.pathSuffix)}"><td class="mono">${mode(isDir, s.permission)}</td>` +
        `<td>${esc(s.owner)}</td><td>${esc(s.group)}</td>` +
        `<td class="num" title="${s.length} bytes">${human(s.length)}</td>` +
        `<td data-ms="${s.modificationTime}">${minute(s.modificationTime)}</td>` +
        `<td class="num">${isDir ? "-" : s.replication}</td><td>${name}</td></tr>`;
    }).join("") : `<tr class="empty"><td colspan="7">No entries.</td></tr>`;
    for (const th of table.tHead.rows[0].cells) {
      const a = th.querySelector("a");
      a.textContent = a.textContent.replace(/ [▲▼]$/, "") +
        (th.dataset.col === state.sort ? (state.order === "asc" ? " ▲" : " ▼") : "");
    }
    if (remaining !== undefined) {
      const parts = [];
      if (state.startAfter) parts.push(`<a href="${esc(explorerUrl(state.path))}">« First page</a>`);
      if (remaining > 0 && rows.length) {
        const last = rows.map((s) => s.pathSuffix).sort().pop();
        parts.push(`<a id="next-page" href="${esc(explorerUrl(state.path, last))}">Next page »</a> ` +
                   `<span class="muted">(${remaining.toLocaleString()} more entries)</span>`);
      }
      document.getElementById("pager").innerHTML = parts.join(" · ");
    }
  }

  function crumbs(path) {
    const parts = path.split("/").filter(Boolean);
    const links = [`<a href="${esc(explorerUrl("/"))}">/</a>`];
    parts.forEach((p, i) => links.push(`<a href="${esc(explorerUrl("/" + parts.slice(0, i + 1).join("/")))}">${esc(p)}</a>`));
    document.getElementById("crumbs").innerHTML = links[0] + " " + links.slice(1).join(" / ");
  }

  function problem(message) {
    let box = document.getElementById("browse-error");
    if (!box) {
      box = document.createElement("div");
      box.id = "browse-error";
      box.className = "problems";
      table.parentNode.insertBefore(box, table);
    }
    box.innerHTML = message ? `<h2>Cannot list</h2><p>${esc(message)}</p>` : "";
    box.style.display = message ? "" : "none";
  }

  async function getJson(url) {
    const r = await fetch(url, {credentials: "same-origin"});
    const doc = await r.json().catch(() => ({}));
    if (!r.ok) {
      const ex = doc.RemoteException || {};
      throw new Error(`${ex.exception || "HTTP " + r.status}: ${ex.message || r.statusText}`);
    }
    return doc;
  }

  async function navigate(path, startAfter, push) {
    table.classList.add("loading");
    try {
      const st = (await getJson(webhdfs(path, "GETFILESTATUS"))).FileStatus;
      let list, remaining = 0;
      if (st.type === "DIRECTORY") {
        const doc = await getJson(webhdfs(path, "LISTSTATUS_BATCH", startAfter ? {startAfter} : {}));
        list = doc.DirectoryListing.partialListing.FileStatuses.FileStatus;
        remaining = doc.DirectoryListing.remainingEntries;
      } else {
        list = [{...st, pathSuffix: path.split("/").pop()}];
      }
      state = {...state, path, startAfter: startAfter || ""};
      rows = list;
      table.dataset.path = path;
      document.getElementById("path").value = path;
      crumbs(path);
      problem("");
      draw(remaining);
      if (push) history.pushState({path, startAfter}, "", explorerUrl(path, startAfter));
    } catch (err) {
      problem(err.message);
    } finally {
      table.classList.remove("loading");
    }
  }

  // the rows the server rendered become the page's data, so sorting works before any fetch
  rows = Array.from(table.tBodies[0].rows).filter((tr) => !tr.classList.contains("empty")).map((tr) => {
    const c = tr.cells;
    const isDir = c[0].textContent.startsWith("d");
    let perm = 0;
    const m = c[0].textContent;
    for (let i = 1; i < 10; i++) if (m[i] !== "-" && m[i] !== "T" && m[i] !== "S") perm |= 1 << (9 - i);
    if (m[9] === "t" || m[9] === "T") perm |= 0o1000;
    return {pathSuffix: tr.dataset.name, type: isDir ? "DIRECTORY" : "FILE", permission: perm.toString(8),
            owner: c[1].textContent, group: c[2].textContent, length: Number(c[3].title.split(" ")[0]),
            modificationTime: Number(c[4].dataset.ms), replication: isDir ? 0 : Number(c[5].textContent)};
  });

  table.tHead.addEventListener("click", (ev) => {
    const th = ev.target.closest("th");
    if (!th) return;
    ev.preventDefault();
    const col = th.dataset.col;
    state.order = col === state.sort && state.order === "asc" ? "desc" : "asc";
    state.sort = col;
    draw();
  });
  document.addEventListener("click", (ev) => {
    const a = ev.target.closest("a");
    if (!a || ev.ctrlKey || ev.metaKey || ev.shiftKey || ev.button !== 0) return;
    const url = new URL(a.href, location.href);
    if (url.pathname !== "/explorer.html" || url.origin !== location.origin || a.closest("thead")) return;
    ev.preventDefault();
    navigate(url.searchParams.get("path") || "/", url.searchParams.get("startAfter") || "", true);
  });
  document.getElementById("pathbox").addEventListener("submit", (ev) => {
    ev.preventDefault();
    let p = document.getElementById("path").value.trim() || "/";
    if (!p.startsWith("/")) p = "/" + p;
    navigate(p.replace(/\/+$/, "") || "/", "", true);
  });
  window.addEventListener("popstate", (ev) => {
    const s = ev.state || {path: new URL(location.href).searchParams.get("path") || "/"};
    navigate(s.path, s.startAfter || "", false);
  });
  history.replaceState({path: state.path, startAfter: state.startAfter}, "", location.href);
})();
