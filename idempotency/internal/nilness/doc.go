// Package nilness tells the constructors of once's public packages whether
// a dependency they were given is missing: nil, or an interface holding a
// nil pointer or a nil function (a typed nil), which compares unequal to nil
// yet panics at its first use. A constructor refuses both at start-up.
package nilness
