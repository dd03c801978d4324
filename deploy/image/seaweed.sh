#!/bin/sh
# SeaweedFS for compose.yaml and the Kubernetes example: one `weed mini` (S3 on 8333), the bucket made, parley's key
# from S3_SECRET_KEY.
set -eu
printf '{"identities":[{"name":"parley","credentials":[{"accessKey":"parley","secretKey":"%s"}],"actions":["Admin","Read","Write","List","Tagging"]}]}' \
  "$S3_SECRET_KEY" > /tmp/s3.json
exec weed mini -dir=/data -ip=seaweed -ip.bind=0.0.0.0 -bucket=parley -s3.config=/tmp/s3.json \
  -admin.ui=false -master.telemetry=false -s3.port=8333
