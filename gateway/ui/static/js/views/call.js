// #/calls/ID: one engine call: where it sits in the call graph, and its tokens.

import { get } from "../api.js";
import { callLink, dash, facts, fmtNum, fmtTime, h, href, link, section, tagList } from "../dom.js";
import { mismatchColor, mismatchView, tokenLegend, tokenView } from "../tokens.js";
import { clippedText } from "./rollout.js";

function header(call) {
  const sampledInPrompt = (call.prompt_mask || []).reduce((a, b) => a + b, 0);
  return section("Call",
    facts([
      ["rollout", link(href.rollout(call.rollout_id), `#${call.rollout_id}`)],
      ["parent", h("span", { testid: "call-parent" }, callLink(call.parent_id, { testid: "parent-link" }))],
      ["fork", call.fork_of == null ? dash()
        : h("span", { testid: "call-fork" }, "fork of ", callLink(call.fork_of),
            ` · ${fmtNum(call.drift_tokens)} drift tokens`)],
      ["tags", h("span", { testid: "call-tags" }, tagList(call.tags))],
      ["finish reason", h("span", { testid: "finish-reason" }, call.finish_reason ?? "–")],
      ["policy version", `v${call.policy_version}`],
      ["adapter", call.adapter_digest == null ? dash()
        : h("span", { testid: "adapter-digest", title: `sha256 ${call.adapter_digest}` },
            `sha256 ${call.adapter_digest.slice(0, 12)}`)],
      ["model", `${call.model} → ${call.engine_model}`],
      ["dialect", call.dialect],
      ["tokens", h("span", { testid: "token-counts" },
        `${fmtNum(call.prompt_ids.length)} prompt (${fmtNum(sampledInPrompt)} sampled earlier) · `
        + `${fmtNum(call.output_ids.length)} output`)],
      ["latency", `${fmtNum(call.latency_ms, 0)} ms`],
      ["created", fmtTime(call.created_at)],
    ], { testid: "call-header" }));
}

// Raw bodies are drawn only when opened: a long conversation's request is megabytes of JSON.
function lazyJson(title, value, testid) {
  const details = h("details", { testid }, h("summary", {}, title));
  details.addEventListener("toggle", () => {
    if (details.open && details.childElementCount === 1) {
      details.append(h("pre", { class: "content json" }, JSON.stringify(value, null, 2)));
    }
  });
  return details;
}

function textCard(call) {
  if (call.prompt_text == null && call.output_text == null) {
    return section("Text", h("p", { class: "muted" }, "No tokenizer on the gateway: no decoded text."));
  }
  return section("Text",
    h("h3", {}, "Prompt"), clippedText(call.prompt_text ?? "", "prompt-text"),
    h("h3", {}, "Output"), clippedText(call.output_text ?? "", "output-text"));
}

// What the learner computed for this call's sampled tokens against what the sampler reported.
function mismatchCard(call) {
  const m = call.mismatch;
  if (!m) {
    return section("Train/inference mismatch", h("p", { class: "muted", testid: "mismatch-none" },
      "Not trained yet: the learner records each token's log-prob against the sampler's when it trains the call."));
  }
  const swatch = (delta) => {
    const span = h("span", { class: "tok sampled" }, delta === 0 ? "0" : `${delta}`);
    span.style.backgroundColor = mismatchColor(delta);
    return span;
  };
  return section("Train/inference mismatch",
    facts([
      ["trained", `step ${m.step}, by policy v${m.version}`],
      ["tokens compared", `${fmtNum(m.tokens)} of ${fmtNum(call.output_ids.length)}`],
      ["mean |Δ|", h("span", { testid: "mismatch-mean" }, m.mean_abs == null ? "–" : `${fmtNum(m.mean_abs, 5)} nats`)],
      ["max |Δ|", m.max_abs == null ? "–" : `${fmtNum(m.max_abs, 5)} nats`],
      ["KL (k3)", m.k3 == null ? "–" : fmtNum(m.k3, 6)],
      ["share over 0.1", m.frac_over == null ? "–" : `${fmtNum(100 * m.frac_over, 1)} %`],
    ], { testid: "mismatch-facts" }),
    h("p", { class: "legend small" }, "|learner − sampler| log-prob: ", swatch(0), " … ", swatch(0.1),
      " nats or more; hover a token for both values."),
    mismatchView(call));
}

export async function callView(ctx, id) {
  const call = await get(`calls/${id}`, { decode: "true" }, ctx.signal);
  ctx.crumbs([["runs", href.runs()], [`rollout #${call.rollout_id}`, href.rollout(call.rollout_id)],
    [`call #${call.id}`, href.call(call.id)]]);
  const hasPieces = Array.isArray(call.prompt_pieces) && Array.isArray(call.output_pieces);
  ctx.show(
    h("h1", {}, `Call #${call.id}`),
    header(call),
    section("Tokens", tokenLegend(hasPieces, Array.isArray(call.prompt_roles)), tokenView(call)),
    mismatchCard(call),
    textCard(call),
    section("Raw", lazyJson("request (as the client sent it)", call.request, "raw-request"),
      lazyJson("response (as the engine answered)", call.response, "raw-response")));
}
