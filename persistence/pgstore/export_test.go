package pgstore

// LoadManySQL is loadManySQL, for the plan test.
var LoadManySQL = loadManySQL
