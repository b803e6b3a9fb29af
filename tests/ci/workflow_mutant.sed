# .github/workflows/parity.yml with five mistakes tests/ci/workflow_check.py must name
# (ctest ci.workflow_check_catches_wrong_names): a script that does not exist, a parity
# subcommand and a matrix option misspelt, an artifact path ci/gate does not write, and the
# summary's relative links left on for the step summary.
s#run: ci/setup#run: ci/set_up#
s#run: ci/gate#run: ci/gate \&\& build/parity matirx \&\& build/parity matrix --summry x#
s#build/gate/logs/#build/gate/log/#
s#GATE_SUMMARY_LINKS: none#GATE_SUMMARY_LINKS: relative#
