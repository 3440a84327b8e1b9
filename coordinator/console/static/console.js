// The console's one script: no build step, nothing fetched but this console's own routes.
// It keeps the page live: an EventSource on /events (the coordinator's event stream, resumed by
// the browser with Last-Event-ID after a reconnect), a short list of the latest events, and on
// events a fresh copy of the page's #live part (?fragment=1), never more often than the
// server's data-refresh-ms. A `resync` event (events were missed) reads the part again at once.
// The part says which event its data had seen (data-seq): when that is older than the last event
// this page received, the part is read again after the gap, so a burst's last events always show.
"use strict";
(function () {
  var EVENTS_SHOWN_MAX = 30;
  var live = document.getElementById("live");
  var status = document.getElementById("live-status");
  var list = document.getElementById("events");
  var runFilter = document.body.getAttribute("data-run-filter") || "";
  var pending = null, last = 0, inflight = false, eventsSeen = 0, lastSeq = 0;

  function noteId(id) {
    var seq = Number(String(id || "").split("-")[1] || 0);
    if (seq > lastSeq) lastSeq = seq;
  }

  function setStatus(state) {
    if (!status) return;
    status.setAttribute("data-state", state);
    status.textContent = state;
  }

  function refresh() {
    pending = null;
    if (!live || inflight) { if (live) schedule(); return; }
    inflight = true;
    last = Date.now();
    var url = new URL(window.location.href);
    url.searchParams.set("fragment", "1");
    fetch(url.toString(), { credentials: "same-origin", cache: "no-store" })
      .then(function (r) {
        if (r.status === 401) { window.location.reload(); return null; }
        return r.ok ? r.text() : null;
      })
      .then(function (html) {
        if (html === null) return;
        var holder = document.createElement("div");
        holder.innerHTML = html;
        var fresh = holder.querySelector("#live");
        if (fresh) {
          live.replaceWith(fresh);
          live = fresh;
          if (Number(fresh.getAttribute("data-seq") || 0) < lastSeq) schedule(false);
        }
        document.body.setAttribute("data-refreshes", String(Number(document.body.getAttribute("data-refreshes") || 0) + 1));
      })
      .catch(function () {})
      .finally(function () { inflight = false; });
  }

  function schedule(now) {
    if (!live) return;
    var gap = Number(live.getAttribute("data-refresh-ms") || 1000);
    var wait = now ? 0 : Math.max(0, last + gap - Date.now());
    if (pending !== null) { if (!now) return; clearTimeout(pending); }
    pending = setTimeout(refresh, wait);
  }

  function show(ev) {
    eventsSeen += 1;
    if (!list) return;
    var li = document.createElement("li");
    var t = new Date(ev.at_ms || Date.now()).toISOString().substring(11, 19);
    li.textContent = t + " " + ev.event + (ev.subject ? " " + ev.subject : "") + (ev.detail ? ": " + ev.detail : "");
    li.setAttribute("data-event", ev.event);
    list.insertBefore(li, list.firstChild);
    while (list.childNodes.length > EVENTS_SHOWN_MAX) list.removeChild(list.lastChild);
    list.setAttribute("data-events", String(eventsSeen));
  }

  if (!window.EventSource) { setStatus("no live updates"); return; }
  var src = new EventSource("/events" + (runFilter ? "?run=" + encodeURIComponent(runFilter) : ""));
  src.addEventListener("open", function () { setStatus("live"); });
  src.addEventListener("error", function () { setStatus("reconnecting"); });
  src.addEventListener("hello", function (e) {
    try { noteId(JSON.parse(e.data).last_id); } catch (err) { /* no id: nothing to compare */ }
    setStatus("live");
    schedule(true);
  });
  src.addEventListener("fleet", function (e) {
    noteId(e.lastEventId);
    try { show(JSON.parse(e.data)); } catch (err) { /* a malformed line is skipped */ }
    schedule(false);
  });
  src.addEventListener("resync", function () { schedule(true); });
})();
