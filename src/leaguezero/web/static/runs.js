// The run page: the runs this server follows; for one run its league table, Elo chart, PFSP
// shares and recent matches (redrawn every few seconds while the run goes on) and a Yatzy
// run's report (reloaded when the run has new iterations).
const params = new URLSearchParams(location.search);
const REFRESH_MS = Number(params.get("refresh") ?? 5000);
const fmt = (x, d = 0) => (x === null || x === undefined ? "" : Number(x).toFixed(d));
let reportStamp = null;

function rows(tbody, items, cells) {
  document.querySelector(tbody).replaceChildren(...items.map((it) => el("tr", {}, ...cells(it).map((c) => el("td", {}, c)))));
}

async function showList() {
  const data = await api("GET", "/api/runs");
  const list = document.getElementById("runs");
  list.replaceChildren(...data.runs.map((r) => el("li", {},
    el("a", { href: `/runs?run=${r.index}` }, r.name), ` (${r.kinds.join(", ") || "nothing to show yet"})`)));
  if (!data.runs.length) list.append(el("li", {}, "no runs: start the server with --run"));
}

async function showRun(index) {
  const data = await api("GET", `/api/runs/${index}`);
  document.getElementById("run").hidden = false;
  document.getElementById("run-name").textContent = data.name;
  document.getElementById("updated").textContent = new Date().toLocaleTimeString();
  const league = data.league;
  document.getElementById("league").hidden = !league;
  if (league) {
    const m = league.metadata;
    document.getElementById("league-meta").textContent =
      `league ${m.run_name}: best ${m.best_agent ?? "-"} (${fmt(m.best_elo)}); anchor ${m.anchor} = ${fmt(m.anchor_elo)}`;
    // Ratings relative to base_model (= 0) next to the absolute ones, when the league has it.
    document.getElementById("elo-relative-head").textContent = league.relative_to ? `vs ${league.relative_to}` : "";
    rows("#league-table tbody", league.agents, (a) => [a.name + (a.retired ? " (retired)" : ""), a.type, fmt(a.elo),
      a.elo_relative === null ? "" : `${a.elo_relative >= 0 ? "+" : ""}${fmt(a.elo_relative)}`,
      a.low === null ? "" : `[${fmt(a.low)}, ${fmt(a.high)}]`, a.matches, a.step ?? ""]);
    const p = league.pfsp;
    document.getElementById("pfsp-steps").textContent = p.draws
      ? `${p.draws} draws over steps ${p.steps.join(", ")}` : "no opponent draws logged yet";
    rows("#pfsp-buckets tbody", p.buckets, (b) => [b.name, b.draws, `${(100 * b.share).toFixed(0)}%`]);
    rows("#pfsp-opponents tbody", p.opponents, (b) => [b.name, b.draws, `${(100 * b.share).toFixed(0)}%`]);
    rows("#matches tbody", league.recent_matches, (x) => [x.step ?? "", x.kind,
      x.seats.map((s) => `${s.agent}: ${s.score}`).join(", ")]);
    if (league.has_elo_chart) document.getElementById("elo-chart").src = `/runs/${index}/elo.png?t=${Date.now()}`;
    showPayoff(league.payoff);
  }
  const yatzy = data.kinds.includes("yatzy");
  document.getElementById("yatzy").hidden = !yatzy;
  const status = document.getElementById("run-status");
  status.hidden = !data.yatzy_status;
  if (data.yatzy_status) status.textContent = statusLine(data.yatzy_status);
  if (yatzy) {
    const stamp = data.stats_mtime;
    if (stamp !== reportStamp) {  // reload the report only when the run has written new stats
      reportStamp = stamp;
      loadReport(index, stamp);
      document.getElementById("report-link").href = `/runs/${index}/report`;
    }
  }
}

// The payoff table: a row per agent, its Nash-averaged rating, then its score against each.
function showPayoff(payoff) {
  const table = document.getElementById("payoff-table");
  if (!payoff) {
    table.tHead.replaceChildren();
    table.tBodies[0].replaceChildren(el("tr", {}, el("td", {}, "no games recorded yet")));
    return;
  }
  table.tHead.replaceChildren(el("tr", {}, el("th", {}, "agent"), el("th", {}, "Nash avg"),
    ...payoff.agents.map((a) => el("th", {}, a))));
  table.tBodies[0].replaceChildren(...payoff.agents.map((a, i) => el("tr", {}, el("td", {}, a),
    el("td", {}, fmt(payoff.nash[a].rating, 3)),
    ...payoff.cells[i].map((c) => el("td", {}, c ? `${fmt(c[0], 2)}/${c[1]}` : "")))));
}

function duration(s) {
  if (s < 90) return `${Math.round(s)} s`;
  if (s < 5400) return `${Math.round(s / 60)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}

// "iteration 5 of 60 · now: train · ETA 2.3 h · best network: solitaire 195.0 ± 4.1 (SE) ..."
function statusLine(st) {
  const parts = [st.iterations ? `iteration ${st.iteration} of ${st.iterations}` : `iteration ${st.iteration}`];
  const names = { selfplay: "self-play", train: "training", gate: "gating", eval: "oracle evaluation", promote: "promotion" };
  parts.push(st.phase ? `now: ${names[st.phase] ?? st.phase} of iteration ${st.iteration + 1}` : "finished");
  if (st.eta_s !== null) parts.push(`ETA ${duration(st.eta_s)} (${duration(st.seconds_per_iteration)} an iteration)`);
  if (st.best) parts.push(bestText(st.best));
  if (st.last_promoted !== null) parts.push(`last promoted at iteration ${st.last_promoted}`);
  return parts.join(" · ");
}

// The network that is best now, as measured: never the maximum of the iterations' small noisy
// estimates (which can top the oracle's 248.4); yz eval's large measurement when there is one.
function bestText(b) {
  const se = b.se === null || b.se === undefined ? " (no standard error recorded)" : ` ± ${fmt(b.se, 1)} (SE)`;
  const boards = b.boards ? ` over ${Number(b.boards).toLocaleString("en")} boards` : "";
  let text = `best network: solitaire mean ${fmt(b.mean, 1)}${se}${boards}`;
  if (b.source === "yz eval") {
    const m = b.vs_oracle || {};
    if (m.a_win_rate !== null && m.a_win_rate !== undefined) {
      text += `, win rate against the oracle ${fmt(m.a_win_rate, 4)}` +  // as yz eval prints it
        (m.a_win_rate_se ? ` ± ${fmt(m.a_win_rate_se, 4)}` : "") +
        ` over ${Number(m.games).toLocaleString("en")} games`;
    }
    text += ` (yz eval of ${b.model}${b.stale ? "; best.pt changed since: run yz eval again" : ""})`;
  } else {
    text += ` (its eval at iteration ${b.iteration}, a small sample; yz eval RUN measures it on 2,000 boards)`;
  }
  return text;
}

// The new report loads out of sight beside the shown one and takes its place once loaded, sized
// to its content, with the page's scroll kept: no blank, no jump to the top.
function loadReport(index, stamp) {
  const holder = document.getElementById("report-holder");
  const shown = document.getElementById("report");
  const fresh = el("iframe", { class: shown ? "report loading" : "report", "data-stamp": stamp,
    id: shown ? null : "report", src: `/runs/${index}/report?t=${stamp}` });
  const loading = document.getElementById("report-loading");
  loading.hidden = false;  // building the report's charts takes seconds
  loading.textContent = shown ? "updating the report (the run has new iterations)…" : "loading the report (drawing its charts takes a few seconds)…";
  fresh.addEventListener("load", () => {
    loading.hidden = true;
    const y = window.scrollY;
    fresh.style.height = `${fresh.contentDocument.documentElement.scrollHeight + 20}px`;
    if (shown) shown.remove();
    fresh.id = "report";
    fresh.classList.remove("loading");
    window.scrollTo(0, y);
  }, { once: true });
  holder.append(fresh);
}

async function tick(index) {
  try { showError(null); await showRun(index); } catch (err) { showError(err); }
  if (REFRESH_MS > 0) setTimeout(() => tick(index), REFRESH_MS);
}

showList().catch(showError);
if (params.has("run")) tick(Number(params.get("run")));
