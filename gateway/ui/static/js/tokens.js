// The token view of one call: its prompt then its output, one inline span per token id.
//
// Sampled tokens (the output, and prompt tokens an ancestor call sampled: prompt_mask = 1) are what
// the learner trains on; both are shaded by the sampler's logprob (prompt_logprobs for the prompt's),
// and the prompt's carry a mark of their own: an earlier call sampled them. Prompt tokens the model
// did not sample (the template, user text, tool output: prompt_mask = 0) are dimmed.
//
// Each prompt token also shows its role (call.prompt_roles: runs [role, start, end), null when the
// store has none): tool results, what the environment said back, are shaded; the other roles carry a
// mark of their own (see tokenLegend). A role's class is built from ROLES only, never from the data.

import { fmtNum, h } from "./dom.js";

const WORST_LOGPROB = -5; // red at or below this; green at 0

// The API's role names (store.roles.ROLE_NAMES) and how the legend names them.
const ROLES = { system: "system / tools", user: "user", tool: "tool result", assistant: "model's earlier turn",
                template: "template glue", unknown: "unknown" };

/** One role name (or null) per prompt token, from the API's runs; names it does not know are left out. */
function promptRoles(call) {
  const roles = new Array(call.prompt_ids.length).fill(null);
  for (const run of call.prompt_roles || []) {
    const [name, start, end] = Array.isArray(run) ? run : [];
    if (!Object.hasOwn(ROLES, name)) continue;
    for (let i = Math.max(0, start); i < Math.min(end, roles.length); i++) roles[i] = name;
  }
  return roles;
}

/** Background for a sampled token: hue 120 (green) at logprob 0 down to 0 (red) at WORST_LOGPROB. */
export function logprobColor(logprob) {
  const t = Math.min(1, Math.max(0, logprob / WORST_LOGPROB));
  return `hsl(${Math.round(120 * (1 - t))}, 70%, 84%)`;
}

// Whitespace that would otherwise be invisible or collapse the layout gets a visible mark.
function shown(piece) {
  if (piece === "") return "∅";
  return piece.replace(/\n/g, "↵\n").replace(/\t/g, "→\t");
}

function describe(sampled, logprob, version) {
  const by = version === undefined || version < 0 ? "" : ` (v${version})`;
  const origin = sampled === "earlier" ? `sampled by an earlier call${by}` : sampled ? null : "not sampled";
  return [origin, logprob === undefined ? null : `logprob ${fmtNum(logprob, 4)}`];
}

/** sampled: true (this call's output), "earlier" (a prompt token an ancestor sampled) or false. */
function tokenSpan(id, piece, { part, index, sampled, logprob, version, role }) {
  const known = piece !== null && piece !== undefined;
  const text = known ? shown(piece) : `[${id}]`;
  const title = [`${part} ${index}`, `id ${id}`, known ? JSON.stringify(piece) : null,
                 ...describe(sampled, logprob, version), role ? `role: ${ROLES[role]}` : null].filter(Boolean).join(" · ");
  const kind = sampled ? `sampled${sampled === "earlier" ? " earlier" : ""}` : "masked";
  const roleClass = role ? ` tr-${role}` : "";
  const span = h("span", { class: `tok ${kind} ${part}${known ? "" : " id-only"}${roleClass}`, testid: "token", title });
  span.textContent = text;
  if (sampled) span.dataset.sampled = "1";
  if (role) span.dataset.role = role;
  if (logprob !== undefined) {
    span.dataset.logprob = String(logprob);
    span.style.backgroundColor = logprobColor(logprob);
  }
  return span;
}

/** The options of prompt token i: sampled earlier (prompt_mask 1) with its logprob when the API gives it. */
function promptToken(call, i, role) {
  if (!call.prompt_mask || call.prompt_mask[i] !== 1) return { part: "prompt", index: i, sampled: false, role };
  const logprob = call.prompt_logprobs?.[i];
  return { part: "prompt", index: i, sampled: "earlier", logprob: typeof logprob === "number" ? logprob : undefined,
           version: call.prompt_versions?.[i], role };
}

/**
 * call: a CallDetail with prompt_ids, prompt_roles, output_ids, output_logprobs, and when decoded
 * prompt_pieces, output_pieces, prompt_mask, prompt_logprobs, prompt_versions. Returns the element (built in one
 * fragment: prompts run to 32k tokens).
 */
export function tokenView(call) {
  const frag = document.createDocumentFragment();
  const promptPieces = call.prompt_pieces || [];
  const outputPieces = call.output_pieces || [];
  const roles = promptRoles(call);
  call.prompt_ids.forEach((id, i) => frag.append(tokenSpan(id, promptPieces[i], promptToken(call, i, roles[i]))));
  frag.append(h("span", { class: "tok-divider", testid: "output-start", title: "the call's output starts here" },
    "▶ output"));
  call.output_ids.forEach((id, i) => frag.append(
    // a teacher's or demonstration's call (source) stores no sampler log-probs: unshaded
    tokenSpan(id, outputPieces[i], { part: "output", index: i, sampled: true, logprob: call.output_logprobs?.[i] })));
  return h("div", { class: "tokens", testid: "token-view" }, frag);
}

/** hasRoles: the call's prompt roles are known (prompt_roles is not null). */
export function tokenLegend(hasPieces, hasRoles) {
  const sample = (cls, text, color) => {
    const span = h("span", { class: `tok ${cls}` }, text);
    if (color) span.style.backgroundColor = color;
    return span;
  };
  return h("p", { class: "legend small" },
    "Sampled tokens by logprob: ", sample("sampled", "0", logprobColor(0)), " ",
    sample("sampled", "−2.5", logprobColor(-2.5)), " ", sample("sampled", "≤ −5", logprobColor(-5)),
    " · ", sample("sampled earlier prompt", "sampled by an earlier call", logprobColor(-0.5)),
    " · ", sample("masked prompt", "not sampled (masked)"),
    h("br"), "Prompt roles: ",
    hasRoles ? Object.entries(ROLES).map(([role, label]) => [sample(`masked prompt tr-${role}`, label), " "])
      : h("span", { testid: "roles-unknown" }, "not recorded for this call"),
    hasPieces ? null : h("span", { class: "warn" }, " · no tokenizer on the gateway: token ids shown"));
}

const WORST_MISMATCH = 0.1; // nats: red at or above this |learner - sampler| (learner.mismatch.THRESHOLD)

/** Background for a compared token: green at |Δ| 0, red at WORST_MISMATCH and beyond. */
export function mismatchColor(delta) {
  const t = Math.min(1, Math.abs(delta) / WORST_MISMATCH);
  return `hsl(${Math.round(120 * (1 - t))}, 70%, 80%)`;
}

/**
 * The output tokens coloured by |learner - sampler| log-prob (call.mismatch.deltas, null: not
 * compared); hovering shows both log-probs.
 */
export function mismatchView(call) {
  const frag = document.createDocumentFragment();
  const pieces = call.output_pieces || [];
  call.output_ids.forEach((id, i) => {
    const piece = pieces[i];
    const known = piece !== null && piece !== undefined;
    const delta = call.mismatch.deltas[i];
    const sampler = call.output_logprobs?.[i];
    const compared = typeof delta === "number" && typeof sampler === "number";
    const title = [`output ${i}`, `id ${id}`, known ? JSON.stringify(piece) : null,
      compared ? `sampler ${fmtNum(sampler, 4)} · learner ${fmtNum(sampler + delta, 4)} · Δ ${fmtNum(delta, 4)}`
        : "not compared (sampled by another version)"].filter(Boolean).join(" · ");
    const span = h("span", { class: `tok ${compared ? "sampled" : "masked"} output`, testid: "mismatch-token", title });
    span.textContent = known ? shown(piece) : `[${id}]`;
    if (compared) {
      span.dataset.delta = String(delta);
      span.style.backgroundColor = mismatchColor(delta);
    }
    frag.append(span);
  });
  return h("div", { class: "tokens", testid: "mismatch-view" }, frag);
}
