-- Whether some batch is still being filled from subjects (its cursor fill_after is
-- set): the tick continues fills only then, so an idle tick pays this one statement
-- for them, a seek on the partial index batches_filling (empty when none fills).
SELECT EXISTS (SELECT 1 FROM batches INDEXED BY batches_filling
               WHERE fill_after IS NOT NULL) AS filling;
