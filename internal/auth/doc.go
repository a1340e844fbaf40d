// Package auth maps API keys to tenants for the API Gateway REQUEST
// authorizer.
//
// Keys live in the ApiKeysTable as the lower-case hex SHA-256 of the key
// (pk), never in clear, next to the tenant they belong to. Keys looks them up;
// Seed writes them for the devstack from ONCE_DEV_API_KEYS (ParsePairs).
//
// Authorizer is the Lambda authorizer itself. For a request carrying
// "Authorization: Bearer <key>" it answers:
//
//   - no Authorization header, an ambiguous one (two spellings of the name,
//     or the header repeated, with different values), or not a Bearer
//     credential: the error "Unauthorized", which API Gateway turns into
//     401;
//   - an unknown key: a Deny policy (403);
//   - a known key: an Allow policy whose principalId is the tenant, with the
//     context {"tenant": tenant};
//   - a failure to read the table: an error (API Gateway answers 500). It
//     never allows a request it could not check.
//
// API Gateway caches an authorizer's answer per identity source (here the
// Authorization header) for every route of the stage, so both policies cover
// the whole stage (arn:aws:execute-api:region:account:api/stage/*/*), not only
// the method that happened to be called first. A method ARN with an empty
// partition, region or account, or a wildcard in any part up to its stage,
// is refused (an error): the policy's only wildcards are the method and
// path.
package auth
