#!/usr/bin/env bash
# LocalStack ready hook (runs inside the container, when LocalStack is ready,
# and again from localstack/deploy.sh through `docker compose exec`).
#
# Deploys the once stack from /opt/once, which localstack/deploy.sh fills on
# the host (localstack/render): one zip per function, template.yaml with each
# CodeUri pointing at LocalStack's S3, and deploy.env. LocalStack keeps
# nothing across restarts, so this redeploys the last rendered stack on every
# start; with nothing rendered yet it does nothing.
set -euo pipefail

dir=${ONCE_ARTIFACTS_DIR:-/opt/once}
if [[ ! -f $dir/deploy.env || ! -f $dir/template.yaml ]]; then
  echo "once: no stack rendered yet; run 'make localstack-deploy' to build and deploy it"
  exit 0
fi

# STACK_NAME, REGION, BUCKET, STAGE, PARAMETERS (an array).
# shellcheck source=/dev/null
source "$dir/deploy.env"
export AWS_DEFAULT_REGION=$REGION AWS_REGION=$REGION

if ! awslocal s3api head-bucket --bucket "$BUCKET" >/dev/null 2>&1; then
  awslocal s3 mb "s3://$BUCKET" >/dev/null
fi
shopt -s nullglob
for zip in "$dir"/*.zip; do
  awslocal s3 cp --only-show-errors "$zip" "s3://$BUCKET/${zip##*/}"
done

echo "once: deploying stack $STACK_NAME (${PARAMETERS[*]})"
awslocal cloudformation deploy \
  --stack-name "$STACK_NAME" \
  --template-file "$dir/template.yaml" \
  --s3-bucket "$BUCKET" --s3-prefix templates \
  --capabilities CAPABILITY_IAM \
  --no-fail-on-empty-changeset \
  --parameter-overrides "${PARAMETERS[@]}"

awslocal cloudformation describe-stacks --stack-name "$STACK_NAME" \
  --query 'Stacks[0].Outputs[].[OutputKey,OutputValue]' --output text
api_id=$(awslocal cloudformation describe-stacks --stack-name "$STACK_NAME" \
  --query "Stacks[0].Outputs[?OutputKey=='ApiId'].OutputValue" --output text)
echo "once: API at http://$api_id.execute-api.localhost.localstack.cloud:4566/$STAGE/v1/payments"
echo "once: (or http://localhost:4566/_aws/execute-api/$api_id/$STAGE/v1/payments)"
