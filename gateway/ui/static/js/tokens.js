// The token view of one call: its prompt then its output, one inline span per token id.
//
// Sampled tokens (the output, and prompt tokens an ancestor call sampled: prompt_mask = 1) are what
// the learner trains on; the output's are shaded by the sampler's logprob. Prompt tokens the model
// did not sample (the template, user text, tool output: prompt_mask = 0) are dimmed.

import { fmtNum, h } from "./dom.js";

const WORST_LOGPROB = -5; // red at or below this; green at 0

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

function tokenSpan(id, piece, { part, index, sampled, logprob }) {
  const known = piece !== null && piece !== undefined;
  const text = known ? shown(piece) : `[${id}]`;
  const title = [`${part} ${index}`, `id ${id}`, known ? JSON.stringify(piece) : null,
                 logprob === undefined ? (sampled ? "sampled by an earlier call" : "not sampled")
                   : `logprob ${fmtNum(logprob, 4)}`].filter(Boolean).join(" · ");
  const span = h("span", { class: `tok ${sampled ? "sampled" : "masked"} ${part}${known ? "" : " id-only"}`,
                           testid: "token", title });
  span.textContent = text;
  if (sampled) span.dataset.sampled = "1";
  if (logprob !== undefined) span.style.backgroundColor = logprobColor(logprob);
  return span;
}

/**
 * call: a CallDetail with prompt_ids, output_ids, output_logprobs, and when decoded prompt_pieces,
 * output_pieces, prompt_mask. Returns the element (built in one fragment: prompts run to 32k tokens).
 */
export function tokenView(call) {
  const frag = document.createDocumentFragment();
  const promptPieces = call.prompt_pieces || [];
  const outputPieces = call.output_pieces || [];
  const mask = call.prompt_mask || [];
  call.prompt_ids.forEach((id, i) => frag.append(
    tokenSpan(id, promptPieces[i], { part: "prompt", index: i, sampled: mask[i] === 1 })));
  frag.append(h("span", { class: "tok-divider", testid: "output-start", title: "the call's output starts here" },
    "▶ output"));
  call.output_ids.forEach((id, i) => frag.append(
    tokenSpan(id, outputPieces[i], { part: "output", index: i, sampled: true, logprob: call.output_logprobs[i] })));
  return h("div", { class: "tokens", testid: "token-view" }, frag);
}

export function tokenLegend(hasPieces) {
  const sample = (cls, text, color) => {
    const span = h("span", { class: `tok ${cls}` }, text);
    if (color) span.style.backgroundColor = color;
    return span;
  };
  return h("p", { class: "legend small" },
    "Sampled output by logprob: ", sample("sampled", "0", logprobColor(0)), " ",
    sample("sampled", "−2.5", logprobColor(-2.5)), " ", sample("sampled", "≤ −5", logprobColor(-5)),
    " · ", sample("sampled prompt", "sampled earlier"), " · ", sample("masked prompt", "not sampled (masked)"),
    hasPieces ? null : h("span", { class: "warn" }, " · no tokenizer on the gateway: token ids shown"));
}
