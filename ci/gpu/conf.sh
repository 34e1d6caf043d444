# ci/gpu/conf.sh (issue 12): conformance you can trust, on the H200. ~11.5 min in total (adversarial + invariants last; split-kv + cascade-vs-plain < 90 s).
# Proves: (1) the real GPU backends (FA2/3/4, FlashInfer) pass the conformance grid under the
# per-request rel-L2 gate, incl. the new features-bite / fp8-kv-scales / flashinfer-workspace
# cases (zero false mismatches except the documented FlashInfer e5m2 mask-fill bug);
# (2) every GPU mutant of tests/mutants/gpu.py (FA2/FA3 and FlashInfer wrapped with one bug
# each) is flagged `mismatch`; (3) the FlashInfer workspace batch plans without error.
# Sourced by the session script: uses $H, $R and step.
export PYTHONPATH="tests:${PYTHONPATH:-}"
step 200 conf12-fa $H run suites/conformance.yaml --backends flash-attn --no-time --quiet \
  --case '*dtype=bfloat16*' --case 'fp8*' --case 'features*' --out $R/conf12-fa
step 150 conf12-fi $H run suites/conformance.yaml --backends flashinfer --variant flashinfer.prefill_backend=fa2 \
  --no-time --quiet --case '*dtype=bfloat16*' --case 'fp8*' --case 'features*' --case 'flashinfer-workspace*' \
  --out $R/conf12-fi
step 60 conf12-fi-ws $H run suites/conformance.yaml --backends flashinfer --no-time --quiet \
  --case 'flashinfer-workspace*' --out $R/conf12-fi-ws
step 60 conf12-real $H run suites/conformance-gpu-mutants.yaml --backends flash-attn,flashinfer,torch-math \
  --no-time --quiet --out $R/conf12-real
step 200 conf12-mutants $H run suites/conformance-gpu-mutants.yaml --backends "$(python3 tests/mutants/gpu.py)" \
  --no-time --quiet --out $R/conf12-mutants
step 20 conf12-verdict sh -c "python3 tests/mutants/verdict.py $R/conf12-real $R/conf12-mutants $R/conf12-fa $R/conf12-fi $R/conf12-fi-ws > $R/conf12-verdict.txt 2>&1; cat $R/conf12-verdict.txt"
step 150 conf12-adv $H run suites/conformance-adversarial.yaml --backends flash-attn,flashinfer,torch-math \
  --variant flashinfer.prefill_backend=fa2 --no-time --quiet --out $R/conf12-adv
step 120 conf12-inv $H run suites/conformance-gpu-mutants.yaml --backends flash-attn,flashinfer --variant flash-attn.fa_version=3 \
  --variant flashinfer.prefill_backend=fa2 --no-time --invariants --quiet --case 'mixed' --case 'fp8*' --out $R/conf12-inv
step 20 conf12-verdict2 sh -c "python3 tests/mutants/verdict.py $R/conf12-adv $R/conf12-inv >> $R/conf12-verdict.txt 2>&1; tail -5 $R/conf12-verdict.txt"
# Correctness lane (GPU 1), < 90 s: the split-kv invariant (num_splits=1 vs 8 on FA3, FlashInfer
# disable_split_kv vs fixed_split_size=1 page) and cascade-vs-plain (flashinfer-cascade vs
# flashinfer, flash-attn-cascade vs flash-attn) on their own, each a status in check.invariants.
step 45 conf12-split $H run suites/conformance-gpu-mutants.yaml --backends flash-attn,flashinfer --variant flash-attn.fa_version=3 \
  --variant flashinfer.prefill_backend=fa2 --no-time --invariants --quiet --case 'mixed' --out $R/conf12-split
step 40 conf12-cascade $H run suites/cascade.yaml --backends flashinfer-cascade,flash-attn-cascade --case 'cpu-mixed*length=256*' \
  --no-time --invariants --quiet --out $R/conf12-cascade
step 10 conf12-inv-show sh -c "python3 -c \"import json,glob;[print(r['backend'],r['case'],i['invariant'],i['status'],i['detail'][:90]) for f in glob.glob('$R/conf12-split/results.jsonl')+glob.glob('$R/conf12-cascade/results.jsonl') for r in map(json.loads,open(f)) for i in (r.get('check') or {}).get('invariants',[]) if i['invariant'] in ('split-kv','cascade-vs-plain')]\""
