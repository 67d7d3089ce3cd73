/*-------------------------------------------------------------------------
 *
 * pmwal_version.h
 *		The release version of pmwal, shared by the server module, pmwal_ctl
 *		and (checked by CI) pmwal.control, META.json and debian/changelog.
 *
 * IDENTIFICATION
 *		pmwal_version.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef PMWAL_VERSION_H
#define PMWAL_VERSION_H

#define PMWAL_VERSION		"2.0.0"

#endif							/* PMWAL_VERSION_H */
