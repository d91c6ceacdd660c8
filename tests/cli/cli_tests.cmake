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
parity_cli_test(bad_flag 2 "bogus" run --bogus)
parity_cli_test(golden_verify 0 "OK .*hc_post_tiny_fp32.h5" golden verify)

# Planted faults: the controls pass; each fault fails (exit 1) with a message naming what broke.
set(PLANTED --cases-dir ${DATA}/planted --no-color)
parity_cli_test(planted_control_hf 0 "1 passed, 0 failed" run --case hc_post/planted_control_hf ${PLANTED})
parity_cli_test(planted_control_v1 0 "1 passed, 0 failed" run --case hc_post/planted_control_v1 ${PLANTED})
parity_cli_test(planted_ulp 1 "planted:ulp out vs ref:hf +policy bitwise" run --case hc_post/planted_ulp ${PLANTED})
parity_cli_test(planted_nan 1 "planted:nan +FAIL +out vs ref:hf: 1 NaN mismatch" run --case hc_post/planted_nan ${PLANTED})
parity_cli_test(planted_mutate_input 1 "planted:mutate_input guard 'forward: inputs unchanged': modified in place: 'comb' 1 of"
  run --case hc_post/planted_mutate_input ${PLANTED})
parity_cli_test(planted_unwritten 1 "guard 'forward: every output element written': never written .still poison.: 'out' 1 of"
  run --case hc_post/planted_unwritten ${PLANTED})
parity_cli_test(planted_nondeterministic 1 "guard 'forward: deterministic .two runs bitwise equal.': run-to-run: 'out' 1 of [0-9]+ elements differ"
  run --case hc_post/planted_nondeterministic ${PLANTED})
parity_cli_test(planted_comb_untransposed 1 "planted:comb_untransposed out vs ref:fp64 +policy naive_relative"
  run --case hc_post/planted_comb_untransposed ${PLANTED})
parity_cli_test(planted_extra_bf16_round 1 "planted:extra_bf16_round out vs ref:fp64 +policy ulp<=1"
  run --case hc_post/planted_extra_bf16_round ${PLANTED})

# A golden file changed after its manifest entry was written is refused (exit 2, naming file and hash).
add_test(NAME cli/tampered_golden COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/tampered_golden.sh $<TARGET_FILE:parity>
  ${CMAKE_SOURCE_DIR}/golden)
set_tests_properties(cli/tampered_golden PROPERTIES LABELS cli)
