// The overview refreshes itself: every few seconds it fetches the same page and swaps in its main part and
// the HA badge (one renderer, on the server; without JavaScript the page is simply static).
"use strict";
(function () {
  const PERIOD_MS = 5000;
  async function refresh() {
    try {
      const r = await fetch(location.href, {credentials: "same-origin", headers: {"Accept": "text/html"}});
      if (r.ok) {
        const doc = new DOMParser().parseFromString(await r.text(), "text/html");
        const main = doc.getElementById("main"), badge = doc.getElementById("ha-state");
        if (main) document.getElementById("main").innerHTML = main.innerHTML;
        if (badge) document.getElementById("ha-state").replaceWith(badge);
        document.title = doc.title;
      }
    } catch (err) {
      // the NameNode may be restarting: keep the last page and try again
    }
    setTimeout(refresh, PERIOD_MS);
  }
  setTimeout(refresh, PERIOD_MS);
})();
