# Included from tests/CMakeLists.txt: parity_cli_test(name exit_code output_regex args...)

# Bad input: exit 2 and a message naming the file and the field.
parity_cli_test(unknown_kernel 2 "unknown_kernel/c.toml: case 'hc_nope/tiny' field 'id': unknown kernel 'hc_nope'"
  run --cases-dir ${DATA}/bad/unknown_kernel --case hc_nope/tiny)
parity_cli_test(missing_dims 2 "missing_dims/c.toml: case 'hc_post/no_dims' field 'dims': missing required table"
  list --cases-dir ${DATA}/bad/missing_dims)
parity_cli_test(bad_tolerance 2 "bad_tolerance/c.toml: case 'hc_post/bad_tol' field 'policy.out'.*unknown policy"
  list --cases-dir ${DATA}/bad/bad_tolerance)
parity_cli_test(missing_policy 2 "missing_policy/c.toml: case 'hc_post/no_policy' field 'policy.grad/comb': missing policy"
  list --cases-dir ${DATA}/bad/missing_policy)
parity_cli_test(duplicate_id 2 "duplicate_id/c.toml: duplicate case id 'hc_post/dup'"
  list --cases-dir ${DATA}/bad/duplicate_id)
parity_cli_test(missing_golden 2 "golden 'hc/does_not_exist.h5' not found"
  run --cases-dir ${DATA}/bad/missing_golden --case hc_post/no_golden)
parity_cli_test(unknown_case 2 "no case 'hc_post/nope'" run --case hc_post/nope)
parity_cli_test(list_unknown_suite 2 "suite 'bogus' selects no case" list --suite bogus)
# A golden whose tensors are not the case's (its dtype, or its tokens) is refused, naming the dataset.
parity_cli_test(golden_dtype_mismatch 2 "hc_post_tiny_bf16.h5: dataset '/inputs/residual' is \\[2, 32, 4, 64\\] bf16, but case 'hc_post/golden_dtype' .*needs \\[64, 4, 64\\] fp32"
  run --cases-dir ${DATA}/bad/golden_mismatch --case hc_post/golden_dtype --cpu --no-color)
parity_cli_test(golden_tokens_mismatch 2 "dataset '/inputs/comb' is \\[2, 32, 4, 4\\] fp32, but case 'hc_post/golden_tokens' .*needs \\[32, 4, 4\\] fp32"
  run --cases-dir ${DATA}/bad/golden_mismatch --case hc_post/golden_tokens --cpu --no-color)
parity_cli_test(golden_outside 2 "field 'golden': '../golden/hc/hc_post_tiny_bf16.h5': must be a relative path inside a golden directory"
  list --cases-dir ${DATA}/bad/golden_outside)
# A variant no selected case runs would skip every case and pass.
parity_cli_test(variant_typo 2 "--variant cpu:V1: no selected case runs it" run --suite ci --cpu --variant cpu:V1)
parity_cli_test(bad_flag 2 "bogus" run --bogus)
# An output path that cannot be written is bad input too, named with the reason (parity/files.hpp).
parity_cli_test(json_path_under_a_file 2 "README.md/out.json: cannot create its directory: Not a directory"
  run --case hc_post/hf_tiny_fp32 --cpu --no-color --json ${CMAKE_SOURCE_DIR}/README.md/out.json)
# A case that passes on its CPU variants still says that its CUDA ones did not run.
parity_cli_test(run_names_skipped_variants 0 "parity: [1-9][0-9]* variant runs? skipped \\(CUDA disabled \\(--cpu\\)\\)"
  run --case hc_post/hf_tiny_fp32 --cpu --no-color)
parity_cli_test(golden_verify 0 "OK .*hc_post_tiny_fp32.h5" golden verify)

# Planted faults: the controls pass the gate; the gate fails each fault (exit 1) with a message naming what broke.
set(PLANTED --cases-dir ${DATA}/planted --no-color)
parity_cli_test(planted_control_hf 0 "gate: PASS \\(exit 0\\)" gate --case hc_post/planted_control_hf ${PLANTED})
parity_cli_test(planted_control_v1 0 "gate: PASS \\(exit 0\\)" gate --case hc_post/planted_control_v1 ${PLANTED})
parity_cli_test(planted_ulp 1 "planted:ulp out vs ref:hf +policy bitwise" gate --case hc_post/planted_ulp ${PLANTED})
parity_cli_test(planted_nan 1 "planted:nan +FAIL +out vs ref:hf: 1 NaN mismatch" gate --case hc_post/planted_nan ${PLANTED})
parity_cli_test(planted_mutate_input 1 "planted:mutate_input guard 'forward: inputs unchanged': modified in place: 'comb' 1 of"
  gate --case hc_post/planted_mutate_input ${PLANTED})
parity_cli_test(planted_unwritten 1 "guard 'forward: every output element written': never written .still poison.: 'out' 1 of"
  gate --case hc_post/planted_unwritten ${PLANTED})
parity_cli_test(planted_nondeterministic 1 "guard 'forward: deterministic .two runs bitwise equal.': run-to-run: 'out' 1 of [0-9]+ elements differ"
  gate --case hc_post/planted_nondeterministic ${PLANTED})
parity_cli_test(planted_comb_untransposed 1 "planted:comb_untransposed out vs ref:fp64 +policy naive_relative"
  gate --case hc_post/planted_comb_untransposed ${PLANTED})
parity_cli_test(planted_extra_bf16_round 1 "planted:extra_bf16_round out vs ref:fp64 +policy allclose"
  gate --case hc_post/planted_extra_bf16_round ${PLANTED})

# The generator run again: bitwise on the goldens' CPU platform, else the drift reported with its size and both
# platforms.
add_test(NAME cli/golden_regenerate COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/golden_regenerate.sh $<TARGET_FILE:parity>)
set_tests_properties(cli/golden_regenerate PROPERTIES LABELS cli SKIP_RETURN_CODE 77)
# A golden file changed after its manifest entry was written is refused (exit 2, naming file and hash).
add_test(NAME cli/tampered_golden COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/tampered_golden.sh $<TARGET_FILE:parity>
  ${CMAKE_SOURCE_DIR}/golden)
set_tests_properties(cli/tampered_golden PROPERTIES LABELS cli)

# CI gate (harness/include/parity/gate.hpp): exit 0 on the ci suite against the committed baselines, 1 with the planted
# fault's testcase failing in the JUnit, 2 on a missing golden, an unknown case, or a GPU-only suite without a GPU;
# every exit writes the JUnit, Markdown and JSON reports (gate_reports.sh parses them).
set(GATE_REPORTS bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/gate_reports.sh)
add_test(NAME cli/gate_ci COMMAND ${GATE_REPORTS} 0 "gate: PASS \\(exit 0\\)" "<testsuite name=\"hc_post\""
  $<TARGET_FILE:parity> --suite ci)
add_test(NAME cli/gate_planted_fault COMMAND ${GATE_REPORTS} 1 "gate: FAIL \\(exit 1\\)"
  "name=\"hc_post/planted_comb_untransposed \\[planted:comb_untransposed\\]\">\\s*<failure message=\"out vs ref:fp64: "
  $<TARGET_FILE:parity> --cases-dir ${DATA}/planted --case hc_post/planted_comb_untransposed)
add_test(NAME cli/gate_missing_golden COMMAND ${GATE_REPORTS} 2 "golden 'hc/does_not_exist.h5' not found"
  "<error message=\"[^\"]*golden &apos;hc/does_not_exist.h5&apos; not found"
  $<TARGET_FILE:parity> --cases-dir ${DATA}/bad/missing_golden --case hc_post/no_golden)
add_test(NAME cli/gate_unknown_case COMMAND ${GATE_REPORTS} 2 "no case 'hc_post/nope'" "<error message=\"no case"
  $<TARGET_FILE:parity> --case hc_post/nope)
parity_cli_test(gate_gpu_suite_without_gpu 2 "no GPU for a GPU-only suite" gate --suite perf --cpu --no-color)
add_test(NAME cli/gate_baseline COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/gate_baseline.sh $<TARGET_FILE:parity>)
set_tests_properties(cli/gate_ci cli/gate_planted_fault cli/gate_missing_golden cli/gate_unknown_case cli/gate_baseline
  PROPERTIES LABELS cli)

# Bring-your-own outputs: export, compute outside Parity, compare (skipped when the venv lacks torch or h5py).
add_test(NAME cli/compare_roundtrip COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/compare_roundtrip.sh
  $<TARGET_FILE:parity> ${CMAKE_SOURCE_DIR})
set_tests_properties(cli/compare_roundtrip PROPERTIES LABELS cli SKIP_REGULAR_EXPRESSION "^SKIP: ")
parity_cli_test(compare_needs_a_file 2 "give --export-inputs FILE, --candidate FILE, or both"
  compare --case hc_post/hf_tiny_bf16)

# Bad input never crashes Parity and is named when refused: seeded mutations of a case file, of a results document
# with its history and baselines, and of a compare candidate (malformed_inputs.py; the last with h5py only).
add_test(NAME cli/malformed_inputs COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/venv_python.sh
  ${CMAKE_CURRENT_SOURCE_DIR}/cli/malformed_inputs.py $<TARGET_FILE:parity> ${CMAKE_SOURCE_DIR})
set_tests_properties(cli/malformed_inputs PROPERTIES LABELS cli)

# The gate's perf verdicts: a null run passes again and again; a kernel slowed down 2x fails, named. Timed: serial.
add_test(NAME cli/gate_slowdown COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/gate_slowdown.sh $<TARGET_FILE:parity>
  ${DATA}/slow)
# One intra-op thread for the planted kernel: on the 16-thread GPU machine the fork/join of a 256-token CPU kernel
# costs more than its work, and a 2x slowdown of the work timed x1.22 there (x2.01 on 2 cores).
set_tests_properties(cli/gate_slowdown PROPERTIES LABELS cli RUN_SERIAL ON ENVIRONMENT OMP_NUM_THREADS=1)

# Bisection: stage bisection names the planted stage; a clean case has no divergent stage; commit bisection finds
# a planted regressing commit in a small repository and leaves it as found; perf bisection finds a planted 2x
# slowdown, skipping the commits it cannot judge. Timed: serial.
parity_cli_test(bisect_stages_planted 1 "first divergent stage: gates"
  bisect stages --case hc_pre/planted_pre_rounded --variant planted:pre_rounded --cases-dir ${DATA}/planted)
parity_cli_test(bisect_stages_clean 0 "no stage diverges on its own" bisect stages --case hc_pre/v4_small --variant cpu:v1)
# Without --variant every variant of the case is bisected: the planted one among them fails the bisection.
parity_cli_test(bisect_stages_every_variant 1 "1 of 2 variants diverge"
  bisect stages --case hc_pre/planted_pre_rounded --cases-dir ${DATA}/planted)
# A variant that writes into its inputs is said to, and its stages are judged on the inputs as given (it was blamed on
# the gates stage: the reference ran on the modified inputs).
parity_cli_test(bisect_stages_modified_input 1 "planted:mutate_input modified its inputs in place: '[a-z]+' 1 of [0-9]+ elements"
  bisect stages --case hc_pre/v4_small --variant planted:mutate_input)
add_test(NAME cli/bisect_commits COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/bisect_commits.sh $<TARGET_FILE:parity>)
set_tests_properties(cli/bisect_commits PROPERTIES LABELS cli)
add_test(NAME cli/bisect_perf COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/bisect_perf.sh $<TARGET_FILE:parity>
  ${DATA}/slow)
set_tests_properties(cli/bisect_perf PROPERTIES LABELS cli RUN_SERIAL ON ENVIRONMENT OMP_NUM_THREADS=1)
# Eager times the machine and is never gated: eager SLOWER x1.5 beside an unchanged cuda:v1 (NOT-COMPARABLE) passes.
parity_cli_test(history_check_eager_not_gated 0 "eager \\(the control, not gated\\): 1 SLOWER"
  history check --dir ${DATA}/history_eager)
