// Package samtemplate reads the project's AWS SAM template (template.yaml),
// including CloudFormation's short-form tags (!Ref, !Sub, !GetAtt, ...), so
// that the devstack and the tests build exactly what a deployment builds.
package samtemplate
