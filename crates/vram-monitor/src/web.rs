//! The live page of `vram serve`: one HTML document with inline CSS and
//! JavaScript, no external resources. The current history is embedded in the
//! page so it renders at once, then the script polls `/api/state` (the JSON of
//! [`crate::History::chart`]) and redraws.

use crate::ChartState;

/// The page, with `state` (from [`crate::History::chart`]) embedded
/// and `interval_ms` as the polling period.
pub fn page(state: &ChartState, interval_ms: u64) -> String {
    // `</` inside a script element would end it early; `<\/` is the same JSON.
    let json = serde_json::to_string(state)
        .unwrap_or_default()
        .replace("</", "<\\/");
    PAGE.replace("__STATE__", &json)
        .replace("__INTERVAL__", &interval_ms.max(100).to_string())
}

const PAGE: &str = r##"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width,initial-scale=1">
<title>vram serve</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:0;background:#f6f7f9;color:#1d1f23}
header{background:#1d1f23;color:#fff;padding:10px 18px;display:flex;gap:18px;align-items:baseline}
header h1{font-size:17px;margin:0}#status{color:#9fd39f;font-size:13px}
main{padding:12px 18px;display:grid;gap:14px}
.gpu{background:#fff;border-radius:8px;padding:12px 14px;box-shadow:0 1px 3px #0002}
.gpu h2{font-size:15px;margin:0 0 6px}.bar{height:12px;background:#e4e7ec;border-radius:6px;overflow:hidden;margin:3px 0 8px}
.bar>div{height:100%;background:#0072B2}.bar.util>div{background:#009E73}
.charts{display:grid;grid-template-columns:2fr 1fr;gap:10px}
svg{width:100%;height:auto;background:#fbfbfc;border:1px solid #eee;border-radius:4px}
table{border-collapse:collapse;width:100%;margin-top:8px;font-size:13px}
td,th{padding:3px 8px;border-bottom:1px solid #eee;text-align:right;white-space:nowrap}
td.cmd,th.cmd{text-align:left;max-width:420px;overflow:hidden;text-overflow:ellipsis}
.muted{color:#777}
</style></head>
<body>
<header><h1>vram serve</h1><span id="source"></span><span id="status">loading…</span>
<a href="/metrics" style="color:#9cf;margin-left:auto">/metrics</a></header>
<main id="gpus"></main>
<script type="application/json" id="initial">__STATE__</script>
<script>
"use strict";
const INTERVAL = __INTERVAL__;
const COLORS = ["#0072B2","#D55E00","#009E73","#CC79A7","#E69F00","#56B4E9","#F0E442","#000000"];
function human(b){ if(b==null) return "—"; const u=["B","KiB","MiB","GiB","TiB"]; let i=0,v=b;
  while(v>=1024&&i<u.length-1){v/=1024;i++;} return i? v.toFixed(1)+" "+u[i] : b+" B"; }
function esc(s){ return String(s).replace(/[&<>"']/g,c=>({"&":"&amp;","<":"&lt;",">":"&gt;","\"":"&quot;","'":"&#39;"}[c])); }
function chart(series, ymax, fmt, w, h, ymin, xl){
  ymin = ymin||0; const span = Math.max(ymax-ymin, 1e-9);
  const L=64,R=8,T=8,B=18; let n=0; series.forEach(s=>{n=Math.max(n,s.values.length);});
  let out='<svg viewBox="0 0 '+w+' '+h+'" data-series="'+series.length+'">';
  for(let i=0;i<=4;i++){ const v=ymin+span*i/4, y=T+(1-i/4)*(h-T-B);
    out+='<line x1="'+L+'" x2="'+(w-R)+'" y1="'+y.toFixed(1)+'" y2="'+y.toFixed(1)+'" stroke="#e3e3e3"/>';
    out+='<text x="'+(L-4)+'" y="'+(y+4).toFixed(1)+'" font-size="10" text-anchor="end" fill="#555">'+fmt(v)+'</text>'; }
  series.forEach((s,k)=>{ let pts=[],segs=[];
    s.values.forEach((v,i)=>{ if(v==null){ if(pts.length) segs.push(pts); pts=[]; return; }
      const x=L+(n<2?0:i/(n-1))*(w-L-R), y=T+(1-Math.min((v-ymin)/span,1.05))*(h-T-B); pts.push(x.toFixed(1)+","+y.toFixed(1)); });
    if(pts.length) segs.push(pts);
    segs.forEach(p=>{ out+='<polyline class="series" fill="none" stroke-width="1.6" stroke="'+(s.color||COLORS[k%COLORS.length])+'" points="'+p.join(" ")+'"><title>'+esc(s.name)+'</title></polyline>'; }); });
  if(xl){ out+='<text x="'+L+'" y="'+(h-4)+'" font-size="10" fill="#555">'+esc(xl[0])+'</text>'
    +'<text x="'+(w-R)+'" y="'+(h-4)+'" font-size="10" text-anchor="end" fill="#555">'+esc(xl[1])+'</text>'; }
  return out+'</svg>';
}
// A process's own range, so growth shows; a flat line (range under 1/64 of
// the maximum) is drawn flat instead of amplifying jitter.
function spark(values,color){ const v=values.filter(x=>x!=null); const hi=Math.max(1,...v), lo=Math.min(hi,...v);
  const flat=(hi-lo)<hi/64; return chart([{name:"history",values:values,color:color}], flat?hi*2:hi, ()=>"", 160, 36, flat?0:lo); }
function render(st){
  document.getElementById("source").textContent = st.source ? "source: "+st.source : "";
  const n = (st.t||[]).length;
  document.getElementById("status").textContent = "live · "+n+" samples · "+(st.t_ms? new Date(st.t_ms).toLocaleTimeString() : "no data");
  const main = document.getElementById("gpus"); main.dataset.gpuCount = st.gpus.length;
  const span = n>1 ? (st.t[n-1]-st.t[0])/1000 : 0;
  const xl = ["-"+(span<120? span.toFixed(0)+" s" : (span/60).toFixed(1)+" min"), "now"];
  main.innerHTML = st.gpus.map(g=>{
    const used=g.memory_used_bytes,total=g.memory_total_bytes,pct=total?100*used/total:0, u=g.utilization_pct;
    const mem=[{name:"used",values:g.used,color:"#1d1f23"}].concat(g.processes.map((p,k)=>({name:p.pid+" "+p.command,values:p.bytes,color:COLORS[k%COLORS.length]})));
    const rows = g.processes.slice().sort((a,b)=>(b.current_bytes||0)-(a.current_bytes||0)).map(p=>{
      const k=g.processes.indexOf(p);
      return '<tr class="proc" data-pid="'+p.pid+'"><td><span style="color:'+COLORS[k%COLORS.length]+'">■</span> '+p.pid+'</td><td>'+esc(p.user)+'</td><td class="cmd" title="'+esc(p.command)+'">'+esc(p.command)+'</td><td>'+(p.current_bytes==null?'<span class="muted">gone</span>':human(p.current_bytes))+'</td><td>'+(p.current_bytes==null||!total?"—":(100*p.current_bytes/total).toFixed(1)+"%")+'</td><td style="width:160px">'+spark(p.bytes,COLORS[k%COLORS.length])+'</td></tr>'; }).join("");
    return '<section class="gpu" data-gpu="'+g.index+'"><h2>GPU '+g.index+' · '+esc(g.name)+'</h2>'
      +'<div>memory <b class="mem-text">'+human(used)+' / '+human(total)+'</b> ('+pct.toFixed(1)+'%)</div><div class="bar"><div style="width:'+pct.toFixed(1)+'%"></div></div>'
      +'<div>utilisation <b>'+(u==null?"n/a":u+"%")+'</b></div><div class="bar util"><div style="width:'+(u||0)+'%"></div></div>'
      +'<div class="charts"><div>'+chart(mem,total,human,640,200,0,xl)+'</div><div>'+chart([{name:"util %",values:g.util,color:"#009E73"}],100,v=>v.toFixed(0)+"%",320,200,0,xl)+'</div></div>'
      +'<table><tr><th>pid</th><th>user</th><th class="cmd">command</th><th>GPU memory</th><th>share</th><th>history</th></tr>'+rows+'</table></section>';
  }).join("");
}
render(JSON.parse(document.getElementById("initial").textContent));
async function poll(){
  try { const r = await fetch("/api/state",{cache:"no-store"}); if(r.ok) render(await r.json()); }
  catch(e){ document.getElementById("status").textContent = "disconnected: "+e; }
  setTimeout(poll, INTERVAL);
}
setTimeout(poll, INTERVAL);
</script></body></html>
"##;
