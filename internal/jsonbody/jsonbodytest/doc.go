// Package jsonbodytest checks, for the fuzz targets of the endpoints'
// decoders, that a refused body is answered as the API answers it: a
// *problem.FieldError that renders as 400 invalid_request and names the
// field at fault whenever the body is a well-formed JSON object (and the
// field has a name).
package jsonbodytest
