package pgstore

// LoadManySQL is loadManySQL, for the plan test.
var LoadManySQL = loadManySQL

// SaveSQL returns the two Save statements, plain and journal, with their
// check of creations, for the plan test.
func SaveSQL(schema string) (plain, journal string) {
	s := newStore(nil, schema)
	return s.saveSQL[withCreates], s.journalSaveSQL[withCreates]
}
