# Tampered checkpoints through the real command (issue 15). Included from resume_tests.cmake
# (P, S, PARITY_RESUME_SCEN, PARITY_RESUME_RUN). One good checkpoint of fsdp4 after 2 steps
# (4 rank files, batch 8: data_position 16); each test copies it, damages the copy with
# ckpt_tamper and runs the three readers on it: `parity run --resume`, `parity ckpt inspect`
# and `parity ckpt export`. Each must refuse it with exit 3 (a damaged checkpoint,
# core/exit_codes.h) and a message naming what is wrong:
#   swap_in_tensor              two chunk records of one tensor point at each other's bytes
#   swap_two_tensors            the same between two tensors of one shape (keys kept)
#   swap_two_tensors_with_keys  ... keys swapped too, metadata.json's checksum recomputed
#   swap_in_tensor_fixed        swap_in_tensor with metadata.json's checksum recomputed
#   step_edit                   step 3, data_position 24: consistent with each other
#   step_edit_fixed             ... and metadata.json's checksum recomputed
#   flipped_data_byte           one bit of a chunk's bytes in rank1.safetensors
#   flipped_header_byte         one bit of rank2.safetensors' header
#   version1                    metadata.json of format version 1 (no checksums to verify)
# "_fixed" cases pass metadata.json's own checksum: only the rank files' headers tell.
set(PARITY_TAMPER $<TARGET_FILE:ckpt_tamper>)
add_test(NAME ckpt.tamper.intact
         COMMAND sh -c "rm -rf '${S}/tgood' && ${P} run ${PARITY_RESUME_SCEN}/fsdp4.json --steps 2 --save-at 2 --ckpt '${S}/tgood' >/dev/null && \
${P} ckpt inspect '${S}/tgood'; echo inspect-exit=$?; ${P} ckpt export '${S}/tgood' '${S}/tgood.safetensors'; echo export-exit=$?; \
rm -rf '${S}/tgood_r' && cp -r '${S}/tgood' '${S}/tgood_r' && ${PARITY_RESUME_RUN} '${S}/tgood_r' 2>&1; echo resume-exit=$?")
set_tests_properties(ckpt.tamper.intact PROPERTIES FIXTURES_SETUP parity_tamper_good
  PASS_REGULAR_EXPRESSION "verdict: OK[^\n]*\ninspect-exit=0\n[^\n]*step 2[^\n]*\nexport-exit=0\n.*resumed from [^\n]*tgood_r at step 2.*verdict: PASS.*resume-exit=0\n")

# parity_tamper_test(NAME "ckpt_tamper ARGS after DIR" REGEX): REGEX must appear in the output
# of each of the three readers, each exiting 3.
function(parity_tamper_test name how regex)
  string(REPLACE " " ";" how_list "${how}")
  list(GET how_list 0 mode)
  list(REMOVE_AT how_list 0)
  string(REPLACE ";" " " rest "${how_list}")
  set(d "${S}/t_${name}")
  add_test(NAME ckpt.tamper.${name}
           COMMAND sh -c "rm -rf '${d}' && cp -r '${S}/tgood' '${d}' && ${PARITY_TAMPER} ${mode} '${d}' ${rest} && \
${PARITY_RESUME_RUN} '${d}' 2>&1; echo resume-exit=$?; ${P} ckpt inspect '${d}' 2>&1; echo inspect-exit=$?; \
${P} ckpt export '${d}' '${d}.safetensors' 2>&1; echo export-exit=$?; test -e '${d}.safetensors' && echo exported")
  set_tests_properties(ckpt.tamper.${name} PROPERTIES FIXTURES_REQUIRED parity_tamper_good
    LABELS "ckpt;fault;resume;multiprocess" TIMEOUT 180
    PASS_REGULAR_EXPRESSION "${regex}.*resume-exit=3\n.*${regex}.*verdict: CORRUPT[^\n]*\ninspect-exit=3\n.*${regex}.*export-exit=3\n$"
    FAIL_REGULAR_EXPRESSION "resumed from|exported")
endfunction()

set(disagree "rank[0-9]\\.safetensors: tensor '[^']+' chunk [^ ]+: metadata\\.json disagrees with the file's header on")
parity_tamper_test(swap_in_tensor "swap" "${disagree} rect \\(metadata\\.json \\[[0-9]+:[0-9]+, 0:16\\], file \\[[0-9]+:[0-9]+, 0:16\\]\\)")
parity_tamper_test(swap_two_tensors "swap --two-tensors" "${disagree} offset \\(metadata\\.json [0-9]+, file [0-9]+\\)")
parity_tamper_test(swap_two_tensors_with_keys "swap --two-tensors --keys --fix-checksum" "${disagree} tensor \\(metadata\\.json '[^']+', file '[^']+'\\)")
parity_tamper_test(swap_in_tensor_fixed "swap --fix-checksum" "${disagree} rect \\(metadata\\.json \\[[0-9]+:[0-9]+, 0:16\\], file \\[[0-9]+:[0-9]+, 0:16\\]\\)")
parity_tamper_test(step_edit "step 3 24" "rank0\\.safetensors: metadata\\.json disagrees with the file's header on step \\(metadata\\.json 3, file 2\\), data_position \\(metadata\\.json 24, file 16\\)")
parity_tamper_test(step_edit_fixed "step 3 24 --fix-checksum" "rank0\\.safetensors: metadata\\.json disagrees with the file's header on step \\(metadata\\.json 3, file 2\\), data_position \\(metadata\\.json 24, file 16\\)")
parity_tamper_test(flipped_data_byte "flip rank1.safetensors -100" "rank1\\.safetensors: checksum mismatch in tensor '[^']+' \\(chunk [^ ]+, rows")
parity_tamper_test(flipped_header_byte "flip rank2.safetensors 40" "rank2\\.safetensors: header checksum mismatch: metadata\\.json says crc32c:[0-9a-f]+, read crc32c:[0-9a-f]+")
parity_tamper_test(version1 "version1" "metadata\\.json: \\$\\.version: is 1, this build reads version 2 only")
set_tests_properties(ckpt.tamper.intact PROPERTIES LABELS "ckpt;fault;resume;multiprocess" TIMEOUT 180)
