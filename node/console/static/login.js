// Exchanges the one-time login token in the URL fragment for a session cookie, then opens the
// overview. The fragment never reaches a server; location.replace drops it from the history.
"use strict";
(function () {
  const status = document.getElementById("login-status");
  const token = location.hash.slice(1);
  if (!token) return;
  history.replaceState(null, "", location.pathname);
  status.textContent = "Logging in…";
  status.dataset.state = "pending";
  fetch("/ui/session", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ token: token }),
    credentials: "same-origin",
  })
    .then(function (r) {
      if (r.ok) {
        status.dataset.state = "ok";
        location.replace("/ui/");
        return;
      }
      status.dataset.state = "refused";
      status.textContent =
        "This login link is unknown, already used or expired (HTTP " + r.status +
        "). Run `odf-node ui` again for a new one.";
    })
    .catch(function (e) {
      status.dataset.state = "error";
      status.textContent = "Could not reach the node: " + e;
    });
})();
