-- Delete one subject. Items already queued keep their own copy of kind and payload.
DELETE FROM subjects WHERE id = ?1 RETURNING id;
