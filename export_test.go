package runclaim

import (
	"reflect"
	"time"
)

// Hooks for the external tests (package runclaim_test); this file is
// compiled only into the test binary.

// SetClaimSchema makes s take its table to be at schema version v, as if
// it had read it.
func SetClaimSchema(s *PostgresStore, v int) { s.schemaVer.set(v) }

// OldestClaimVersion is the oldest schema version a store claims on.
const OldestClaimVersion = oldestClaimVersion

// ClaimSchema returns the schema version s claims by (0: not known yet).
func ClaimSchema(s *PostgresStore) int { return int(s.schemaVer.version.Load()) }

// ClaimFuncName returns the quoted, schema-qualified name of s's claim
// function, and ClaimFuncArgs its argument types.
func ClaimFuncName(s *PostgresStore) string { return s.claimFunc() }

// ClaimBodyName returns the quoted, schema-qualified name of s's claim
// function of the current schema version (sql/claim.sql), and
// ClaimBodyArgs its argument types.
func ClaimBodyName(s *PostgresStore) string { return s.claimBody() }

// ClaimPrevArgs are the argument types of the claim function of the
// version before the current one.
const ClaimPrevArgs = claimPrevArgs

// ClaimPrevName returns the quoted, schema-qualified name of s's claim
// function of the version before the current one (same arguments).
func ClaimPrevName(s *PostgresStore) string { return s.claimPrev() }

// ClaimBodyArgs are the argument types of the claim function of the
// current schema version.
const ClaimBodyArgs = claimBodyArgs

// ClaimFuncArgs are the claim function's argument types.
const ClaimFuncArgs = claimFuncArgs

// StateFuncArgs are the argument types of the claim function's overload
// with a state (version 9).
const StateFuncArgs = stateFuncArgs

// TickFuncArgs are the argument types of the claim function's overload
// with a tick.
const TickFuncArgs = tickFuncArgs

// StoreStatements returns the statements s sends, by the name of the field
// of s.sql that holds each (the fields' texts as filled for s's table).
func StoreStatements(s *PostgresStore) map[string]string {
	out := map[string]string{}
	v := reflect.ValueOf(s.sql)
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.String && f.String() != "" {
			out[v.Type().Field(i).Name] = f.String()
		}
	}
	return out
}

// PinSearchPathSQL starts every step that Migrations returns.
const PinSearchPathSQL = pinSearchPathSQL

// SetPreviousKeyLocks makes s lock keys as the release before this one
// did: by KeyLock of its namespace only, as a replica of that release
// beside this one in a rolling deploy.
func SetPreviousKeyLocks(s *PostgresStore) { s.previousKeyLocks = true }

// StartsTable returns the quoted, schema-qualified name of s's table of
// keys' starts.
func StartsTable(s *PostgresStore) string { return s.startsTable() }

// KeysTable returns the quoted, schema-qualified name of s's table of
// keys' limits and cooldowns.
func KeysTable(s *PostgresStore) string { return s.keysTable() }

// AdvisoryKeyOf is PostgresStore.AdvisoryKey in namespace.
func AdvisoryKeyOf(namespace, source string) int64 { return advisoryKey(namespace, source) }

// TableKeyLockOf is the key's lock of table that PostgresStore.KeyLocks
// returns first.
func TableKeyLockOf(table, key string) int64 { return tableKeyLock(table, key) }

// ValidateClaims is what ClaimMany refuses before it sends anything.
var ValidateClaims = validateClaims

// SkipExclusionProbe makes s claim without proving that the database's
// advisory locks exclude: what a store without the probe would do.
func SkipExclusionProbe(s *PostgresStore) { s.probed.settled.Store(true) }

// SetMigrateLockWait bounds s's wait for the migration lock in Migrate to
// d, in place of its 30 s: a test that holds the lock on purpose then
// waits d for the error.
func SetMigrateLockWait(s *PostgresStore, d time.Duration) { s.migrateLockWait = d }
