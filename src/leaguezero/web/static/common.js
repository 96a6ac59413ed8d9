// Shared helpers of the leaguezero pages: JSON calls that surface the server's one-line error.
async function api(method, url, body) {
  // X-Leaguezero: what a page on another site cannot send without a preflight (web/guard.py)
  const opts = { method, headers: { "X-Leaguezero": "1" } };
  if (body !== undefined) {  // a string is sent as it is (an uploaded JSON file)
    opts.headers["Content-Type"] = "application/json";
    opts.body = typeof body === "string" ? body : JSON.stringify(body);
  }
  let res = await fetch(url, opts);
  // 503: the server was busy and did nothing (web/workers.py); wait as it says and ask again.
  for (let tries = 0; res.status === 503 && tries < 5; tries++) {
    const wait = Number(res.headers.get("Retry-After") || 2);
    await new Promise((resolve) => setTimeout(resolve, 1000 * wait));
    res = await fetch(url, opts);
  }
  let data = null;
  try { data = await res.json(); } catch (e) { data = { error: res.statusText }; }
  if (!res.ok) throw new Error(data.error || res.statusText);
  return data;
}
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v; else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (v !== null && v !== undefined && v !== false) node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}
function showError(err) { document.getElementById("error").textContent = err ? (err.message || String(err)) : ""; }
