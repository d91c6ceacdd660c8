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
