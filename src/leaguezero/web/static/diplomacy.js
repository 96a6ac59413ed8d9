// The Diplomacy page: start a game (agents on every power, perhaps one for you), step it phase
// by phase on the map, browse back through its phases, or replay a saved game.
const params = new URLSearchParams(location.search);
const AUTO_DELAY_MS = Number(params.get("delay") ?? 800);  // between phases when playing on alone
let game = null;
let busy = false;

async function setup() {
  const data = await api("GET", "/api/diplomacy/agents");
  const bots = document.getElementById("bot-list");
  for (const a of data.agents) bots.append(el("option", { value: a }));  // pretrained among them
  const seats = document.querySelector("#seats tbody");
  const human = document.getElementById("human");
  for (const p of data.powers) {
    seats.append(el("tr", {}, el("td", {}, p), el("td", {},
      el("input", { id: `agent-${p}`, "data-power": p, list: "bot-list", value: "random_bot", size: 26 }))));
    human.append(el("option", { value: p }, p));
  }
}

// "All other seats": one agent in every seat but the one you play.
function fillSeats() {
  const agent = document.getElementById("all-seats").value.trim();
  const human = document.getElementById("human").value;
  for (const input of document.querySelectorAll("#seats input")) if (input.dataset.power !== human) input.value = agent;
}

// An order as the page shows it: a convoyed move says so.
const orderText = (order) => order.replace(/ VIA$/, " (via convoy)");

// "FRANCE: A PAR - BUR (bounce), A MAR - SPA": a power's orders with what became of them.
function orderList(orders) {
  return Object.entries(orders).filter(([, list]) => list.length).map(([power, list]) => {
    const li = el("li", { "data-power": power }, `${power}: `);
    list.forEach((o, i) => {
      li.append(`${i ? ", " : ""}${orderText(o.order)}`);
      if (o.results.length) li.append(" ", el("span", { class: "result" }, `(${o.results.join(", ")})`));
    });
    return li;
  });
}

function show(data) {
  if (!game || game.id !== data.id) document.getElementById("setup").open = false;  // the board first
  game = data;
  document.getElementById("board").hidden = false;
  document.getElementById("map").innerHTML = data.svg;  // the engine's own SVG of the board
  const current = data.index === data.phases.length - 1;
  const ph = document.getElementById("phase");
  ph.textContent = data.phase_name + (current ? "" : `  (phase ${data.index + 1} of ${data.phases.length})`);
  ph.dataset.phase = data.phase;
  const slider = document.getElementById("slider");
  slider.max = data.phases.length - 1; slider.value = data.index;
  const modes = { watch: "Watching the agents play.", play: `You play ${data.human}.`, replay: "Replaying a saved game." };
  document.getElementById("mode").textContent = modes[data.mode] + (data.done ? " The game is over." : "");
  const outcome = document.getElementById("outcome");
  outcome.hidden = !data.outcome; outcome.textContent = data.outcome || "";
  const canStep = data.mode !== "replay" && !data.done && current;
  document.getElementById("play-controls").hidden = data.mode === "replay";
  document.getElementById("step").disabled = !canStep;
  document.getElementById("step").textContent = data.mode === "play" ? "Submit orders" : "Next phase";
  document.getElementById("auto-label").hidden = data.mode !== "watch";
  renderOrders(data, current);
  document.querySelector("#powers tbody").replaceChildren(...data.powers.map((p) =>
    el("tr", { "data-power": p.power }, el("td", {}, p.power), el("td", {}, p.agent), el("td", {}, p.centers))));
  document.getElementById("orders-head").textContent = current ? "Orders this phase" : `Orders of ${data.phase_name}`;
  document.getElementById("phase-orders").replaceChildren(...orderList(data.orders));
  const turn = data.last_turn;  // the last movement with its results, then retreats and builds
  document.getElementById("played").hidden = !turn;
  if (turn) {
    document.getElementById("played-name").textContent = `Last turn: ${turn.phase_name}`;
    document.getElementById("played-name").dataset.phase = turn.phase;
    document.getElementById("played-map").innerHTML = turn.svg;
    document.getElementById("played-orders").replaceChildren(...orderList(turn.orders));
    document.getElementById("played-then").replaceChildren(...turn.then.map((t) =>
      el("li", { "data-phase": t.phase }, el("b", {}, `Then ${t.phase_name}: `), ...orderList(t.orders).map((li) => el("span", {}, li.textContent, " ")))));
  }
  document.getElementById("notes").replaceChildren(...(turn ? turn.notes : []).map((n) => el("li", {}, n)));
  document.getElementById("colours").replaceChildren(...Object.entries(data.colours).map(([power, colour]) =>
    el("span", { class: "power-colour", "data-power": power }, el("span", { class: "chip", style: `background:${colour}` }), ` ${power} `)));
  if (data.mode === "watch" && canStep && document.getElementById("auto").checked) {
    setTimeout(() => { if (document.getElementById("auto").checked) step(); }, AUTO_DELAY_MS);
  }
}

// One choice per unit (moves, retreats); builds and disbands as a count of choices among the
// sites or units, so the form cannot make a set the engine refuses.
function renderOrders(data, current) {
  const form = document.getElementById("orders");
  form.replaceChildren();
  form.onchange = null;  // the limits of the last phase's form go with it
  if (data.mode !== "play" || !current || data.done) return;
  const locs = Object.keys(data.legal);
  if (!locs.length) { form.append(el("p", { class: "muted" }, "Nothing for you to order this phase.")); return; }
  if (data.adjustment > 0) return renderBuilds(form, data, locs);
  if (data.adjustment < 0) return renderDisbands(form, data, locs);
  const retreat = data.phase_type === "R";
  if (retreat) form.append(el("p", { class: "muted" }, "Your dislodged units: retreat or disband. Two units retreating to one place are both disbanded, so a place taken by one is not offered to the others."));
  for (const loc of locs) {
    const none = retreat ? "(no order: disband)" : "(no order: hold)";
    const select = el("select", { "data-loc": loc, name: loc, class: retreat ? "retreat" : "" }, el("option", { value: "" }, none),
      ...data.legal[loc].map((o) => el("option", { value: o }, orderText(o))));
    form.append(el("div", {}, el("label", {}, `${loc} `, select)));
  }
  if (retreat) form.onchange = limitRetreats;
}

const retreatTarget = (order) => (order.includes(" R ") ? order.split(" R ")[1].split("/")[0] : null);

function limitRetreats() {
  const selects = [...document.querySelectorAll("#orders select.retreat")];
  for (const s of selects) {
    const taken = new Set(selects.filter((o) => o !== s).map((o) => retreatTarget(o.value)).filter((t) => t));
    for (const opt of s.options) opt.disabled = taken.has(retreatTarget(opt.value));
  }
}

function renderBuilds(form, data, locs) {
  const owed = Math.min(data.adjustment, locs.length);
  form.append(el("p", { id: "build-count", class: "muted", "data-owed": owed },
    `You may build ${owed} (${locs.length} home centre${locs.length > 1 ? "s" : ""} free): choose up to ${owed} below; the builds you do not choose are waived.`));
  for (const loc of locs) {
    const builds = data.legal[loc].filter((o) => o !== "WAIVE");
    const select = el("select", { "data-loc": loc, name: loc, class: "build" }, el("option", { value: "" }, "(no build here)"),
      ...builds.map((o) => el("option", { value: o }, o)));
    form.append(el("div", {}, el("label", {}, `${loc} `, select)));
  }
  const limit = () => {
    const selects = [...form.querySelectorAll("select.build")];
    const chosen = selects.filter((s) => s.value).length;
    for (const s of selects) s.disabled = !s.value && chosen >= owed;  // no more than owed
  };
  form.onchange = limit;
  limit();
}

function renderDisbands(form, data, locs) {
  const owed = Math.min(-data.adjustment, locs.length);
  form.append(el("p", { id: "disband-count", class: "muted", "data-owed": owed },
    `You must disband ${owed}: tick ${owed} unit${owed > 1 ? "s" : ""} (left to it, the engine picks).`));
  for (const loc of locs) {
    const order = data.legal[loc].find((o) => o.endsWith(" D"));
    form.append(el("div", {}, el("label", {}, el("input", { type: "checkbox", class: "disband", "data-loc": loc, value: order }), ` ${order}`)));
  }
  const limit = () => {
    const boxes = [...form.querySelectorAll("input.disband")];
    const ticked = boxes.filter((b) => b.checked).length;
    for (const b of boxes) b.disabled = !b.checked && ticked >= owed;
  };
  form.onchange = limit;
  limit();
}

async function call(fn) {
  if (busy) return;
  busy = true;
  try { showError(null); await fn(); } catch (err) { showError(err); } finally { busy = false; }
}

function chosenOrders() {
  const selected = [...document.querySelectorAll("#orders select")].map((s) => s.value);
  const ticked = [...document.querySelectorAll("#orders input.disband:checked")].map((b) => b.value);
  return [...selected, ...ticked].filter((v) => v);
}

function step() {
  if (!game) return;
  return call(async () => {
    const button = document.getElementById("step");
    button.disabled = true;
    try {
      show(await api("POST", `/api/diplomacy/games/${game.id}/step`, { orders: chosenOrders() }));
    } catch (err) {
      button.disabled = false;  // refused: the orders stay as chosen, to be fixed and sent again
      throw err;
    }
  });
}

// The chosen orders drawn on the map as they are chosen (the engine's own drawing, as after Submit).
let drawn = 0;
function drawChosen() {
  if (!game || game.mode !== "play") return;
  const asked = ++drawn, id = game.id;
  api("POST", `/api/diplomacy/games/${id}/preview`, { orders: chosenOrders() }).then((data) => {
    if (asked === drawn && game.id === id) document.getElementById("map").innerHTML = data.svg;  // the latest only
  }).catch(showError);
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
document.getElementById("orders").addEventListener("change", drawChosen);
document.getElementById("all-seats-set").addEventListener("click", fillSeats);
// a new choice clears the last refusal: no stale error beside what the browser says itself
for (const kind of ["change", "input"]) document.addEventListener(kind, () => showError(null));
document.getElementById("orders").addEventListener("submit", (ev) => { ev.preventDefault(); step(); });
document.getElementById("auto").addEventListener("change", () => game && show(game));
document.getElementById("first").addEventListener("click", () => goto(0));
document.getElementById("prev").addEventListener("click", () => game && goto(game.index - 1));
document.getElementById("next").addEventListener("click", () => game && goto(game.index + 1));
document.getElementById("last").addEventListener("click", () => game && goto(game.phases.length - 1));
document.getElementById("slider").addEventListener("change", (ev) => goto(Number(ev.target.value)));
setup().catch(showError);
