// The console's one script: no build step, nothing fetched but this console's own routes.
// It keeps the page live: an EventSource on /events (the coordinator's event stream, resumed by
// the browser with Last-Event-ID after a reconnect), a short list of the latest events, and on
// events a fresh copy of each of the page's live parts (`.live-part`, read with
// ?fragment=<data-part>), each never more often than its own data-refresh-ms (a run's progress
// every second, its heavy part as often as its cost allows). A `resync` event (events were
// missed) reads every part again at once. A part says which event its data had seen (data-seq):
// when that is older than the last event this page received, the part is read again after its
// gap, so the last events of a burst always show.
"use strict";
(function () {
  var EVENTS_SHOWN_MAX = 30;
  var status = document.getElementById("live-status");
  var list = document.getElementById("events");
  var runFilter = document.body.getAttribute("data-run-filter") || "";
  var eventsSeen = 0, lastSeq = 0;

  function noteId(id) {
    var seq = Number(String(id || "").split("-")[1] || 0);
    if (seq > lastSeq) lastSeq = seq;
  }

  function setStatus(state) {
    if (!status) return;
    status.setAttribute("data-state", state);
    status.textContent = state;
  }

  function Part(el) {
    this.id = el.id;
    this.name = el.getAttribute("data-part") || "1";
    this.pending = null;
    this.last = 0;
    this.inflight = false;
  }

  Part.prototype.el = function () { return document.getElementById(this.id); };

  Part.prototype.schedule = function (now) {
    var el = this.el();
    if (!el) return;
    var gap = Number(el.getAttribute("data-refresh-ms") || 1000);
    var wait = now ? 0 : Math.max(0, this.last + gap - Date.now());
    if (this.pending !== null) { if (!now) return; clearTimeout(this.pending); }
    var self = this;
    this.pending = setTimeout(function () { self.refresh(); }, wait);
  };

  Part.prototype.refresh = function () {
    var self = this;
    this.pending = null;
    if (this.inflight) { this.schedule(false); return; }
    this.inflight = true;
    this.last = Date.now();
    var url = new URL(window.location.href);
    url.searchParams.set("fragment", this.name);
    fetch(url.toString(), { credentials: "same-origin", cache: "no-store" })
      .then(function (r) {
        if (r.status === 401) { window.location.reload(); return null; }
        return r.ok ? r.text() : null;
      })
      .then(function (html) {
        if (html === null) return;
        var holder = document.createElement("div");
        holder.innerHTML = html;
        var fresh = holder.querySelector("#" + self.id);
        var old = self.el();
        if (fresh && old) {
          old.replaceWith(fresh);
          if (Number(fresh.getAttribute("data-seq") || 0) < lastSeq) self.schedule(false);
        }
        var n = Number(document.body.getAttribute("data-refreshes") || 0) + 1;
        document.body.setAttribute("data-refreshes", String(n));
      })
      .catch(function () {})
      .finally(function () { self.inflight = false; });
  };

  var parts = [];
  document.querySelectorAll(".live-part").forEach(function (el) { parts.push(new Part(el)); });
  function scheduleAll(now) { parts.forEach(function (p) { p.schedule(now); }); }

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
    scheduleAll(true);
  });
  src.addEventListener("fleet", function (e) {
    noteId(e.lastEventId);
    try {
      var evs = JSON.parse(e.data);  // one commit's events of one run (feed.py rule 2)
      (Array.isArray(evs) ? evs : [evs]).forEach(show);
    } catch (err) { /* a malformed message is skipped */ }
    scheduleAll(false);
  });
  src.addEventListener("resync", function () { scheduleAll(true); });
})();
