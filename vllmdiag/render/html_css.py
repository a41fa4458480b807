"""The report's one inline stylesheet: no fonts, images or scripts from anywhere (opens offline)."""

CSS = """
:root{--ok:#1a7f37;--bad:#cf222e;--warn:#9a6700;--unk:#8250df;--mute:#6e7781;--line:#d0d7de;--bg:#f6f8fa}
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;color:#1f2328;margin:0 auto;
 max-width:1180px;padding:24px}
h1{font-size:26px;margin:0 0 4px}h2{font-size:19px;margin:28px 0 8px;border-bottom:1px solid var(--line);padding-bottom:4px}
h3{font-size:15px;margin:18px 0 6px}
code,pre,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12.5px}
pre{background:var(--bg);padding:8px 10px;border-radius:6px;white-space:pre-wrap;overflow-wrap:anywhere;margin:4px 0}
.cmd::before{content:'$ ';color:var(--mute);user-select:none}
table{border-collapse:collapse;margin:6px 0 10px;width:100%}
td,th{border:1px solid var(--line);padding:3px 7px;text-align:left;vertical-align:top}
th{background:var(--bg);font-weight:600}
.banner{border-left:8px solid var(--mute);background:var(--bg);padding:12px 16px;border-radius:6px}
.banner.blocked{border-color:var(--bad)}.banner.degraded{border-color:var(--warn)}.banner.healthy{border-color:var(--ok)}
.banner.inconclusive{border-color:var(--unk)}
.status{font-weight:700;letter-spacing:.04em}.status.blocked{color:var(--bad)}.status.healthy{color:var(--ok)}
.status.degraded{color:var(--warn)}.status.inconclusive{color:var(--unk)}
.meta{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;margin:10px 0 0;color:#424a53}
.meta dt{font-weight:600}.meta dd{margin:0;overflow-wrap:anywhere}
.culprit{background:#ffebe9;outline:2px solid var(--bad);border-radius:3px}
.tag{display:inline-block;font-size:11px;font-weight:700;padding:0 5px;border-radius:8px;color:#fff;background:var(--mute)}
.tag.critical,.tag.blocked,.tag.culprit{background:var(--bad)}.tag.warning,.tag.degraded{background:var(--warn)}
.tag.info{background:var(--mute)}.tag.ok,.tag.healthy{background:var(--ok)}.tag.inconclusive{background:var(--unk)}
.finding{border:1px solid var(--line);border-radius:6px;padding:8px 12px;margin:8px 0}
.finding.critical{border-left:5px solid var(--bad)}.finding.warning{border-left:5px solid var(--warn)}
.tree,.tree ul{list-style:none;margin:0;padding-left:20px}.tree{padding-left:0}
.tree li{position:relative;padding:1px 0}.tree ul li::before{content:"\\2514\\2500 ";color:var(--mute)}
.state-Z,.state-T,.state-t{color:var(--bad);font-weight:700}.state-D{color:var(--warn);font-weight:700}
.ring{display:grid;grid-template-columns:minmax(160px,max-content) 1fr;gap:6px 12px;align-items:center;margin:6px 0}
.bar{display:flex;gap:3px;flex-wrap:wrap}
.cell{min-width:64px;border:1px solid var(--line);border-radius:4px;padding:2px 6px;font-size:12px;position:relative;
 background:linear-gradient(to right,var(--fill,#eaeef2) var(--pct,0%),#fff var(--pct,0%))}
.cell.laggard{outline:3px solid var(--bad);font-weight:700}
.spark{vertical-align:middle}.spark-box{display:inline-flex;flex-direction:column;max-width:240px}
.spark-label{font-size:10.5px;line-height:1.25}
.strip{display:flex;gap:3px;flex-wrap:wrap;margin:4px 0}
.rank{display:inline-flex;flex-direction:column;min-width:70px;border:1px solid var(--line);border-radius:4px;
 padding:2px 6px;font-size:12px;line-height:1.3}.rank small{color:#424a53;overflow-wrap:anywhere}
.rank em{color:var(--bad);font-style:normal;font-weight:700;font-size:11px}
.rank.wait,.rank-key.wait{background:#fff8c5}.rank.run,.rank-key.run{background:#ddf4ff}
.rank.idle,.rank-key.idle{background:#f6f8fa}.rank.other,.rank-key.other{background:#fbefff}
.rank.none,.rank-key.none{background:#fff;border-style:dashed}
.rank.culprit{outline:3px solid var(--bad);background:#ffebe9}
.rank-key{display:inline-block;width:14px;height:12px;border:1px solid var(--line);vertical-align:middle}
table.timeline{width:auto;max-width:100%}table.timeline td{vertical-align:middle}
table.timeline td:first-child{max-width:330px;overflow-wrap:anywhere}table.timeline td:last-child{white-space:nowrap}
td.moved{color:var(--ok)}td.still{color:#424a53}
.culprit-row td:first-child{font-weight:700}
.grid{border-collapse:separate;border-spacing:3px;width:auto}.grid td{border:0;padding:0}
.grid td:nth-child(-n+3){white-space:nowrap}.grid td.why{padding-left:8px;color:#424a53}
.gpu{display:inline-block;width:26px;height:22px;border-radius:4px;text-align:center;font-size:11px;color:#fff;line-height:22px}
.gpu.ok{background:var(--ok)}.gpu.blocked{background:#f4a6a6;color:#1f2328}
.gpu.culprit{background:var(--bad);outline:3px solid #000}
.gpu.degraded{background:#d4a72c}.gpu.unknown{background:var(--unk)}.gpu.none{background:#eaeef2;color:var(--mute)}
details{margin:4px 0}summary{cursor:pointer;color:#0969da}
.legend span{margin-right:14px}
.muted{color:var(--mute)}
footer{margin-top:30px;color:var(--mute);font-size:12px}
@media print{body{max-width:none;padding:0;font-size:11px}details{display:block}details>*{display:block}
 summary{color:inherit}a{color:inherit;text-decoration:none}h2{break-after:avoid}.finding,.ring,tr{break-inside:avoid}
 .banner,.culprit,.gpu,.cell,.tag{-webkit-print-color-adjust:exact;print-color-adjust:exact}}
"""
