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
  document.getElementById("run-path").textContent = data.path;
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
  }
  const yatzy = data.kinds.includes("yatzy");
  document.getElementById("yatzy").hidden = !yatzy;
  if (yatzy) {
    const stamp = data.stats_mtime;
    if (stamp !== reportStamp) {  // reload the report only when the run has written new stats
      reportStamp = stamp;
      document.getElementById("report").src = `/runs/${index}/report?t=${stamp}`;
      document.getElementById("report-link").href = `/runs/${index}/report`;
    }
  }
}

async function tick(index) {
  try { showError(null); await showRun(index); } catch (err) { showError(err); }
  if (REFRESH_MS > 0) setTimeout(() => tick(index), REFRESH_MS);
}

showList().catch(showError);
if (params.has("run")) tick(Number(params.get("run")));
