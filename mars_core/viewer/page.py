"""The replay page's template (HTML, CSS and vanilla JS in one string; `replay.replay_html`
fills in the title and the episodes' data). No network, no build step."""

# The page: a step view (board | reasoning, action, rewards), Prev/Next, a slider, ←/→ keys and
# a timeline strip. All text goes in through textContent, never as markup.
PAGE = """<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width,initial-scale=1"><title>__TITLE__</title><style>
:root{--b:#d0d7de;--mut:#57606a;--bg:#f6f8fa;--red:#cf222e}*{box-sizing:border-box}
body{margin:0;font:15px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;color:#1f2328}
header{padding:12px 20px;border-bottom:1px solid var(--b);background:var(--bg)}h1{font-size:18px;margin:0 0 4px}
.meta{color:var(--mut);font-size:13px;display:flex;flex-wrap:wrap;gap:4px 14px;align-items:center}
.seat{display:inline-flex;gap:5px;align-items:center}.dot{width:10px;height:10px;border-radius:50%;display:inline-block}
.bar{display:flex;gap:10px;align-items:center;padding:10px 20px;border-bottom:1px solid var(--b);
 position:sticky;top:0;background:#fff}
button,select{font:inherit;padding:4px 12px;border:1px solid var(--b);border-radius:6px;background:#fff;cursor:pointer}
button:disabled{opacity:.4;cursor:default}#slider{flex:1;max-width:480px}#step-label{min-width:120px;font-weight:600}
#timeline{display:flex;flex-wrap:wrap;gap:4px;padding:8px 20px;border-bottom:1px solid var(--b)}
.chip{min-width:32px;padding:1px 6px;font-size:12px;border-width:2px}.chip.on{outline:2px solid #1f2328;outline-offset:1px}
.chip.bad{border-color:var(--red)!important;color:var(--red);background:#ffebe9;font-weight:700}
.chip.gated{background:repeating-linear-gradient(45deg,#fff,#fff 4px,#e6e9ed 4px,#e6e9ed 8px)}
main{display:grid;grid-template-columns:minmax(0,5fr) minmax(0,7fr);gap:16px;padding:16px 20px;max-width:1500px}
@media (max-width:900px){main{grid-template-columns:1fr}}
section{border:1px solid var(--b);border-radius:8px;padding:12px 14px;min-width:0}
h2{font-size:12px;text-transform:uppercase;letter-spacing:.05em;color:var(--mut);margin:12px 0 6px}h2:first-child{margin-top:0}
pre{margin:0;white-space:pre-wrap;word-break:break-word;font:13.5px/1.45 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
#board{background:var(--bg);padding:12px;border-radius:6px;font-size:15px}
#reasoning{max-height:42vh;overflow:auto;background:var(--bg);padding:10px;border-radius:6px}
.empty{color:var(--mut);font-style:italic}.bad{color:var(--red)}#action{font:600 17px ui-monospace,monospace}
.badge{padding:2px 10px;border-radius:12px;font-size:13px;font-weight:600}
#gate{background:#fff1e5;color:#953800;border:1px solid #ffb77c}
table{border-collapse:collapse;font-size:14px}td,th{padding:3px 14px 3px 0;text-align:left}
td.n{text-align:right;font-variant-numeric:tabular-nums}
#advantage{margin-top:6px;font-weight:600}details{margin-top:10px}summary{cursor:pointer;color:var(--mut);font-size:13px}
.row{display:flex;gap:8px;align-items:center;flex-wrap:wrap;margin-bottom:10px;font-size:16px}[hidden]{display:none!important}
</style></head><body><header><h1>__TITLE__</h1><div class="meta" id="meta"></div></header>
<div class="bar"><select id="episode" hidden></select>
<button id="prev" title="previous turn (&#8592;)">&#9664; Prev</button>
<input type="range" id="slider" min="0" value="0" aria-label="step"><button id="next" title="next turn (&#8594;)">Next &#9654;</button>
<span id="step-label"></span><span class="meta">&#8592; &#8594; keys</span></div><div id="timeline"></div>
<main><section><h2 id="board-title">Board</h2><pre id="board"></pre>
<details id="rules-box"><summary id="rules-title">Rules</summary><pre id="rules"></pre></details>
<details id="info-box"><summary>Step facts</summary><pre id="info"></pre></details></section>
<section><div class="row"><span id="who"></span><span id="gate" class="badge" hidden></span></div>
<div id="turn-view"><h2>Reasoning</h2><pre id="reasoning"></pre><h2>Action</h2><div id="action"></div>
<pre id="answer" class="empty" hidden></pre><h2>Reward</h2><table id="reward"></table><div id="advantage"></div></div>
<div id="end-view" hidden><h2>Result</h2><table id="results"></table><p id="end-error" class="bad"></p></div>
</section></main><script type="application/json" id="replay-data">__DATA__</script><script>
"use strict";
const EPS=JSON.parse(document.getElementById("replay-data").textContent);
const COLORS=["#0969da","#8250df","#1a7f37","#bf8700","#1b7c83","#bc4c00","#6e7781","#d4a72c"];
const $=id=>document.getElementById(id);let E=EPS[0],step=0;
const num=x=>x===null||x===undefined?"\\u2014":String(Math.round(x*1000)/1000);
function el(tag,text,cls){const e=document.createElement(tag);
 if(text!==undefined)e.textContent=text;if(cls)e.className=cls;return e;}
function dot(p){const d=el("span","","dot");d.style.background=COLORS[p%COLORS.length];return d;}
function rows(t,head,data){t.replaceChildren();
 if(head){const tr=el("tr");head.forEach(h=>tr.append(el("th",h)));t.append(tr);}
 for(const r of data){const tr=el("tr");
  r.forEach((c,i)=>tr.append(el("td",String(c),i&&/^-?[\\d.]+$/.test(c)?"n":"")));t.append(tr);}}
function load(i){E=EPS[i];step=0;const m=$("meta"),n=E.steps.length-1;
 m.replaceChildren(el("span",[E.game,E.episode_id,"seed "+E.seed,n+" turns"].join(" \\u00b7 ")));
 E.agents.forEach((a,p)=>{const s=el("span","","seat");
  s.append(dot(p),el("span",`seat ${p}: ${a} \\u2192 ${E.outcomes[p]||"?"} (${num(E.returns[p])})`));
  m.append(s);});
 if(E.error)m.append(el("span","ended by seat "+E.error_player+": "+E.error,"bad"));
 $("slider").max=n;const tl=$("timeline");tl.replaceChildren();
 E.steps.forEach((s,i)=>{const b=el("button",s.kind==="end"?"end":String(i+1),"chip");
  if(s.kind==="turn"){b.style.borderColor=COLORS[s.player%COLORS.length];
   b.title=`turn ${i+1}, seat ${s.player}: `+(s.valid?s.action:s.error)
    +(s.eligible?"":` (filtered: ${s.gate_reason})`);
   b.classList.toggle("bad",!s.valid);b.classList.toggle("gated",!s.eligible);}
  b.onclick=()=>go(i);tl.append(b);});
 render();}
function go(i){step=Math.max(0,Math.min(E.steps.length-1,i));render();}
function render(){const S=E.steps[step],n=E.steps.length-1,end=S.kind==="end";
 $("slider").value=step;$("prev").disabled=step===0;$("next").disabled=step===n;
 [...$("timeline").children].forEach((c,i)=>c.classList.toggle("on",i===step));
 $("turn-view").hidden=end;$("end-view").hidden=!end;$("rules-box").hidden=end;$("gate").hidden=true;
 $("step-label").textContent=end?`end \\u00b7 ${n} turns`:`turn ${step+1} / ${n}`;
 $("who").replaceChildren();if(end)showEnd(S);else showTurn(S);
 $("info-box").hidden=S.info===null||S.info===undefined;
 $("info").textContent=S.info?JSON.stringify(S.info,null,2):"";}
function showTurn(S){$("board-title").textContent="What seat "+S.player+" saw";
 $("board").textContent=S.observation||"(no observation stored)";
 $("rules-title").textContent="Rules shown to seat "+S.player+" (system prompt)";
 $("rules").textContent=S.rules||"(unknown game)";
 $("who").append(dot(S.player),el("strong"," seat "+S.player),el("span",` \\u00b7 ${S.role} \\u00b7 ${S.agent}`));
 const r=$("reasoning");r.classList.toggle("empty",!S.reasoning);
 r.textContent=S.reasoning||"(no reasoning: the reply was the answer alone)";
 const a=$("action");a.classList.toggle("bad",!S.valid);
 a.textContent=S.valid?S.action:"invalid \\u2014 "+S.error+(S.error_detail?": "+S.error_detail:"");
 const ans=$("answer");ans.hidden=S.valid||!S.answer;ans.textContent="raw answer: "+S.answer;
 const g=$("gate");g.hidden=!!S.eligible;g.textContent="filtered: "+(S.gate_reason||"not eligible");
 rows($("reward"),null,[["game",num(S.game_reward)],["format",num(S.format_reward)],
  ["length",num(S.length_reward)],["total",num(S.reward)]]);
 const none=E.has_advantages?"\\u2014 (not in the training batch)":"\\u2014 (none stored)";
 $("advantage").textContent="advantage: "+(S.advantage!==null?num(S.advantage):none);}
function showEnd(S){const last=E.steps.filter(s=>s.kind==="turn").pop(),ar=S.arena_seats;
 $("board-title").textContent=S.board?"Final board":"Last observation";
 $("board").textContent=S.board||(last?last.observation:"(no turns)");
 $("who").append(el("strong","Game over"));const head=["seat","agent","return","outcome"];
 if(ar)head.push("arena result","cause");
 rows($("results"),head,E.agents.map((a,p)=>{const r=[p,a,num(S.returns[p]),S.outcomes[p]||"?"];
  if(ar){const x=ar[p]||{};r.push(x.result||"\\u2014",x.cause||"\\u2014");}return r;}));
 $("end-error").textContent=S.error?`ended by a rule error of seat ${S.error_player}: ${S.error}`:"";}
$("prev").onclick=()=>go(step-1);$("next").onclick=()=>go(step+1);
$("slider").oninput=e=>go(+e.target.value);
document.addEventListener("keydown",e=>{if(["INPUT","SELECT","TEXTAREA"].includes(e.target.tagName))return;
 const to={ArrowRight:step+1,ArrowLeft:step-1,Home:0,End:E.steps.length-1}[e.key];
 if(to===undefined)return;e.preventDefault();go(to);});
const pick=$("episode");
if(EPS.length>1){pick.hidden=false;pick.onchange=()=>load(+pick.value);
 EPS.forEach((x,i)=>pick.append(new Option(`${x.game} \\u00b7 ${x.episode_id} (${x.kind})`,String(i))));}
load(0);
</script></body></html>
"""
