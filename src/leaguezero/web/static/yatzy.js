// The Yatzy page: one game against an agent; dice are kept by clicking them, boxes marked from
// the card, the agent's moves shown one at a time, the oracle's verdict after each of yours.
let game = null;
let kept = new Set();
let stepping = false;
// Pause between the agent's moves so a person can follow them (?delay=MS sets it).
const AGENT_DELAY_MS = Number(new URLSearchParams(location.search).get("delay") ?? 500);

async function loadAgents() {
  const data = await api("GET", "/api/yatzy/agents");
  const list = document.getElementById("agent-list");
  for (const name of data.agents) list.append(el("option", { value: name }));
  // The best network of each --run folder, by index (run:N): first, so it is seen.
  const runs = data.runs || [];
  list.prepend(...runs.map((r) => el("option", { value: r.spec, label: r.name }, r.name)));
  const note = document.getElementById("run-agents");
  note.hidden = !runs.length;
  note.textContent = runs.length ? `Your runs' best: ${runs.map((r) => `${r.spec} (${r.name})`).join(", ")}.` : "";
}

function render() {
  document.getElementById("table").hidden = false;
  const body = document.querySelector("#card tbody");
  body.replaceChildren();
  const yourTurn = game.to_move === "you";
  for (const row of game.cards) {
    let now = "";
    if (yourTurn && row.now !== null) {
      now = el("button", { class: "mark", "data-cat": row.cat, title: `mark ${row.now} in ${row.label}`,
        onclick: () => move({ mark: row.cat }) }, row.now);
    }
    body.append(el("tr", { "data-box": row.name }, el("td", { class: "box-name" }, row.label),
      el("td", { class: "you-cell" }, row.you === null ? "" : row.you),
      el("td", { class: "agent-cell" }, row.agent === null ? "" : row.agent), el("td", {}, now)));
  }
  document.getElementById("agent-head").textContent = game.agent;  // who the column is
  document.getElementById("mark-hint").hidden = !yourTurn;
  const t = game.totals;
  document.querySelector("#card tfoot").replaceChildren(
    el("tr", {}, el("td", {}, "upper total (bonus at 63)"), el("td", { id: "upper-you" }, t.you.upper), el("td", { id: "upper-agent" }, t.agent.upper), el("td")),
    el("tr", {}, el("td", {}, "upper bonus"), el("td", { id: "bonus-you" }, t.you.bonus ?? ""), el("td", { id: "bonus-agent" }, t.agent.bonus ?? ""), el("td")),
    el("tr", {}, el("th", {}, "score"), el("th", { id: "score-you" }, t.you.score), el("th", { id: "score-agent" }, t.agent.score), el("td")));
  const dice = document.getElementById("dice");
  dice.replaceChildren();
  game.dice.forEach((v, i) => {
    dice.append(el("button", { class: "die" + (kept.has(i) ? " kept" : ""), "data-pos": i, disabled: !yourTurn || game.rerolls === 0,
      onclick: () => { kept.has(i) ? kept.delete(i) : kept.add(i); render(); } }, v));
  });
  document.getElementById("rerolls").textContent = game.over ? "" : `rerolls left: ${game.rerolls}`;
  const status = game.over ? `Game over: ${game.result} (you ${t.you.score}, ${game.agent} ${t.agent.score})`
    : yourTurn ? "Your move: click dice to keep them, then reroll, or mark a box." : `${game.agent} is moving…`;
  const st = document.getElementById("status");
  st.textContent = status;
  st.dataset.toMove = game.over ? "over" : game.to_move;
  document.getElementById("reroll").disabled = !yourTurn || game.rerolls === 0;
  document.getElementById("hint").disabled = !yourTurn || !game.judge;
  document.getElementById("agent-step").hidden = game.over || yourTurn || document.getElementById("auto").checked;
  const log = document.getElementById("log");
  log.replaceChildren(...game.log.map((m) => el("li", { class: m.who }, `${m.who}: ${m.text}`)));
  log.scrollTop = log.scrollHeight;
  if (game.to_move === "agent" && document.getElementById("auto").checked && !stepping) {
    stepping = true;
    setTimeout(() => { stepping = false; agentStep(); }, AGENT_DELAY_MS);
  }
}

async function call(fn) {
  try { showError(null); await fn(); } catch (err) { showError(err); }
}

async function move(body) {
  await call(async () => {
    const data = await api("POST", `/api/yatzy/games/${game.id}/move`, body);
    game = data; kept = new Set();
    document.getElementById("hint-box").hidden = true;
    document.getElementById("verdict").textContent = data.verdict ? `oracle: ${data.verdict}` : "";
    render();
  });
}

async function agentStep() {
  if (!game || game.to_move !== "agent") return;
  await call(async () => { game = await api("POST", `/api/yatzy/games/${game.id}/agent-step`); render(); });
}

document.getElementById("new-game").addEventListener("submit", (ev) => {
  ev.preventDefault();
  call(async () => {
    const button = document.getElementById("start");
    button.disabled = true;
    document.getElementById("status").textContent = "starting…";
    try {
      game = await api("POST", "/api/yatzy/games", {
        agent: document.getElementById("agent").value.trim(), seat: Number(document.getElementById("seat").value),
        seed: Number(document.getElementById("seed").value), judge: document.getElementById("judge").checked });
    } finally { button.disabled = false; }
    kept = new Set();
    document.getElementById("verdict").textContent = "";
    render();
  });
});
document.getElementById("reroll").addEventListener("click", () => move({ keep: [...kept].sort() }));
document.getElementById("agent-step").addEventListener("click", agentStep);
document.getElementById("auto").addEventListener("change", () => game && render());
document.getElementById("hint").addEventListener("click", () => call(async () => {
  const data = await api("GET", `/api/yatzy/games/${game.id}/hint`);
  const box = document.getElementById("hint-box");
  box.textContent = data.hint; box.hidden = false;
}));
loadAgents().catch(showError);
