(function () {
  var tip = document.getElementById("tip");
  function show(ev) {
    var el = ev.target.closest ? ev.target.closest("[data-tip]") : null;
    if (!el) { tip.style.display = "none"; return; }
    tip.textContent = el.getAttribute("data-tip");
    tip.style.display = "block";
    var x = ev.clientX + 14, y = ev.clientY + 14;
    var r = tip.getBoundingClientRect();
    if (x + r.width > window.innerWidth) { x = Math.max(4, ev.clientX - r.width - 14); }
    if (y + r.height > window.innerHeight) { y = Math.max(4, ev.clientY - r.height - 14); }
    tip.style.left = x + "px";
    tip.style.top = y + "px";
  }
  document.addEventListener("mousemove", show);
  document.addEventListener("mouseleave", function () { tip.style.display = "none"; });
  var stamps = document.querySelectorAll("time[data-utc]");
  for (var i = 0; i < stamps.length; i++) {
    var d = new Date(stamps[i].getAttribute("data-utc"));
    if (!isNaN(d.getTime())) { stamps[i].title = "local time " + d.toLocaleString(); }
  }
  document.documentElement.setAttribute("data-interactive", "true");
})();
