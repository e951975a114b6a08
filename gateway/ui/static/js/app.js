// The viewer's entry point: hash routes to views. Each navigation aborts the previous view's
// requests, so a slow page can never draw over the one the user moved on to.

import { ApiError, adminKey, setAdminKey, takeKeyFromUrl } from "./api.js";
import { errorBox, h } from "./dom.js";
import { callView } from "./views/call.js";
import { groupView } from "./views/group.js";
import { liveView } from "./views/live.js";
import { policiesView, policyView } from "./views/policies.js";
import { rolloutView } from "./views/rollout.js";
import { runView } from "./views/run.js";
import { runsView } from "./views/runs.js";

const ROUTES = [
  [/^\/runs\/?$/, () => runsView],
  [/^\/runs\/([^/]+)$/, (m) => (ctx) => runView(ctx, decodeURIComponent(m[1]))],
  [/^\/groups\/(\d+)$/, (m) => (ctx) => groupView(ctx, m[1])],
  [/^\/rollouts\/(\d+)$/, (m) => (ctx) => rolloutView(ctx, m[1])],
  [/^\/calls\/(\d+)$/, (m) => (ctx) => callView(ctx, m[1])],
  [/^\/policies\/?$/, () => policiesView],
  [/^\/policies\/([^/]+)$/, (m) => (ctx) => policyView(ctx, decodeURIComponent(m[1]))],
  [/^\/live\/?$/, () => (ctx) => liveView(ctx)],
  [/^\/live\/([^/]+)$/, (m) => (ctx) => liveView(ctx, decodeURIComponent(m[1]))],
];

const main = document.getElementById("app");
const crumbsNav = document.getElementById("crumbs");
let current = null;

function setCrumbs(items) {
  crumbsNav.replaceChildren(...items.filter(Boolean).flatMap(([label, url], i) =>
    [i ? h("span", { class: "sep" }, "/") : null, h("a", { href: url }, label)].filter(Boolean)));
}

function resolve(path) {
  for (const [pattern, make] of ROUTES) {
    const match = path.match(pattern);
    if (match) return make(match);
  }
  return null;
}

async function render() {
  current?.abort();
  const controller = new AbortController();
  current = controller;
  const path = location.hash.replace(/^#/, "") || "/runs";
  const view = resolve(path);
  const live = () => !controller.signal.aborted;
  const ctx = {
    signal: controller.signal,
    show: (...nodes) => live() && main.replaceChildren(...nodes),
    crumbs: (items) => live() && setCrumbs(items),
  };
  main.dataset.state = "loading";
  main.replaceChildren(h("p", { class: "muted" }, "Loading…"));
  window.scrollTo(0, 0);
  try {
    if (!view) throw new ApiError(404, `no page at #${path}`);
    if (!adminKey()) throw new ApiError(401, "this viewer needs the gateway's admin key");
    await view(ctx);
  } catch (error) {
    if (!live()) return;
    main.replaceChildren(...(error instanceof ApiError && error.status === 401 ? keyForm(error) : [errorBox(error)]));
  }
  // Tests and people alike can tell a finished page from one still loading.
  if (live()) main.dataset.state = "ready";
}

/** Asks for the admin key (a wrong or missing one: the API answered 401), then draws the page again. */
function keyForm(error) {
  const input = h("input", { type: "password", name: "key", autocomplete: "off", testid: "admin-key-input",
                             "aria-label": "admin key" });
  const form = h("form", { class: "key-form", testid: "admin-key-form", onsubmit: (event) => {
    event.preventDefault();
    setAdminKey(input.value.trim());
    render();
  } },
  h("label", {}, "Admin key ", input), " ", h("button", { type: "submit" }, "Open"));
  const hint = h("p", { class: "muted" }, "harnessrl serve prints this page's URL with the key, and keeps the key in "
                 + "$HARNESSRL_HOME/admin.key. It is kept in this tab only.");
  return [errorBox(error), form, hint];
}

window.addEventListener("hashchange", () => { takeKeyFromUrl(); render(); });
takeKeyFromUrl();
render();
