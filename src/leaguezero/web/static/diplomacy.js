// The Diplomacy page: start a game (agents on every power, perhaps one for you), step it phase
// by phase on the map, browse back through its phases, or replay a saved game.
const params = new URLSearchParams(location.search);
const AUTO_DELAY_MS = Number(params.get("delay") ?? 800);  // between phases when playing on alone
let game = null;
let busy = false;

async function setup() {
  const data = await api("GET", "/api/diplomacy/agents");
  const bots = document.getElementById("bot-list");
  for (const b of data.bots) bots.append(el("option", { value: b }));
  const seats = document.querySelector("#seats tbody");
  const human = document.getElementById("human");
  for (const p of data.powers) {
    seats.append(el("tr", {}, el("td", {}, p), el("td", {},
      el("input", { id: `agent-${p}`, "data-power": p, list: "bot-list", value: "random_bot", size: 26 }))));
    human.append(el("option", { value: p }, p));
  }
}

function show(data) {
  if (!game || game.id !== data.id) document.getElementById("setup").open = false;  // the board first
  game = data;
  document.getElementById("board").hidden = false;
  document.getElementById("map").innerHTML = data.svg;  // the engine's own SVG of the board
  const current = data.index === data.phases.length - 1;
  const ph = document.getElementById("phase");
  ph.textContent = data.phase + (current ? "" : `  (phase ${data.index + 1} of ${data.phases.length})`);
  ph.dataset.phase = data.phase;
  const slider = document.getElementById("slider");
  slider.max = data.phases.length - 1; slider.value = data.index;
  const modes = { watch: "Watching the agents play.", play: `You play ${data.human}.`, replay: "Replaying a saved game." };
  document.getElementById("mode").textContent = modes[data.mode] + (data.done ? " The game is over." : "");
  const canStep = data.mode !== "replay" && !data.done && current;
  document.getElementById("play-controls").hidden = data.mode === "replay";
  document.getElementById("step").disabled = !canStep;
  document.getElementById("step").textContent = data.mode === "play" ? "Submit orders" : "Next phase";
  document.getElementById("auto-label").hidden = data.mode !== "watch";
  renderOrders(data, current);
  document.querySelector("#powers tbody").replaceChildren(...data.powers.map((p) =>
    el("tr", { "data-power": p.power }, el("td", {}, p.power), el("td", {}, p.agent), el("td", {}, p.centers))));
  document.getElementById("phase-orders").replaceChildren(...data.powers.filter((p) => p.orders.length).map((p) =>
    el("li", { "data-power": p.power }, `${p.power}: ${p.orders.join(", ")}`)));
  document.getElementById("notes").replaceChildren(...data.notes.map((n) => el("li", {}, n)));
  if (data.mode === "watch" && canStep && document.getElementById("auto").checked) {
    setTimeout(() => { if (document.getElementById("auto").checked) step(); }, AUTO_DELAY_MS);
  }
}

function renderOrders(data, current) {
  const form = document.getElementById("orders");
  form.replaceChildren();
  if (data.mode !== "play" || !current || data.done) return;
  const locs = Object.keys(data.legal);
  if (!locs.length) { form.append(el("p", { class: "muted" }, "Nothing for you to order this phase.")); return; }
  if (data.adjustment) {
    form.append(el("p", { class: "muted" }, data.adjustment > 0 ? `You may build ${data.adjustment}.` : `You must disband ${-data.adjustment}.`));
  }
  for (const loc of locs) {
    const hold = data.adjustment ? "(none)" : "(no order: hold)";
    const select = el("select", { "data-loc": loc, name: loc }, el("option", { value: "" }, hold),
      ...data.legal[loc].map((o) => el("option", { value: o }, o)));
    form.append(el("div", {}, el("label", {}, `${loc} `, select)));
  }
}

async function call(fn) {
  if (busy) return;
  busy = true;
  try { showError(null); await fn(); } catch (err) { showError(err); } finally { busy = false; }
}

function step() {
  return call(async () => {
    const orders = [...document.querySelectorAll("#orders select")].map((s) => s.value).filter((v) => v);
    document.getElementById("step").disabled = true;
    show(await api("POST", `/api/diplomacy/games/${game.id}/step`, { orders }));
  });
}

function goto(index) {
  if (!game) return;
  const i = Math.max(0, Math.min(index, game.phases.length - 1));
  call(async () => show(await api("GET", `/api/diplomacy/games/${game.id}?phase=${i}`)));
}

document.getElementById("new-game").addEventListener("submit", (ev) => {
  ev.preventDefault();
  call(async () => {
    const agents = {};
    for (const input of document.querySelectorAll("#seats input")) agents[input.dataset.power] = input.value.trim();
    const human = document.getElementById("human").value || null;
    if (human) delete agents[human];
    document.getElementById("start").disabled = true;
    try {
      show(await api("POST", "/api/diplomacy/games", { agents, human,
        max_years: Number(document.getElementById("years").value), seed: Number(document.getElementById("seed").value) }));
    } finally { document.getElementById("start").disabled = false; }
  });
});
document.getElementById("replay-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  call(async () => {
    const file = document.getElementById("replay-file").files[0];
    if (!file) throw new Error("choose a saved game (.json) first");
    show(await api("POST", "/api/diplomacy/replays", await file.text()));
  });
});
document.getElementById("step").addEventListener("click", step);
document.getElementById("orders").addEventListener("submit", (ev) => { ev.preventDefault(); step(); });
document.getElementById("auto").addEventListener("change", () => game && show(game));
document.getElementById("first").addEventListener("click", () => goto(0));
document.getElementById("prev").addEventListener("click", () => goto(game.index - 1));
document.getElementById("next").addEventListener("click", () => goto(game.index + 1));
document.getElementById("last").addEventListener("click", () => goto(game.phases.length - 1));
document.getElementById("slider").addEventListener("change", (ev) => goto(Number(ev.target.value)));
setup().catch(showError);
